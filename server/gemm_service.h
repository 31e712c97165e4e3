// The gRPC face of the server: decode, call the core, map the status. Uses the callback
// API, so no gRPC thread ever waits for a GEMM: Matmul validates, allocates the result
// in the response, hands a Job to the executor and returns; the executor's completion
// finishes the RPC. Thread-safe.
#ifndef GEMMD_SERVER_GEMM_SERVICE_H_
#define GEMMD_SERVER_GEMM_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "server/device.h"
#include "server/job_executor.h"
#include "server/matmul_validation.h"
#include "server/metrics.h"

namespace gemmd {

struct ServiceSettings {
  std::string version;
  std::string backend;  // "cpu" or "cuda"
  ValidationLimits limits;
  uint32_t max_queue_size = 0;
  uint32_t max_batch_size = 1;
  absl::Duration max_queue_delay;
  int64_t max_inflight_bytes = 0;
};

class GemmServiceImpl final : public gemm::v1::GemmService::CallbackService {
 public:
  // `devices`, `executor` and `metrics` must outlive the service.
  GemmServiceImpl(ServiceSettings settings, std::vector<Device*> devices, JobExecutor* executor,
                  ServerMetrics* metrics);

  grpc::ServerUnaryReactor* Matmul(grpc::CallbackServerContext* context,
                                   const gemm::v1::MatmulRequest* request,
                                   gemm::v1::MatmulResponse* response) override;
  grpc::ServerUnaryReactor* QuantizedMatmul(grpc::CallbackServerContext* context,
                                            const gemm::v1::QuantizedMatmulRequest* request,
                                            gemm::v1::MatmulResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const gemm::v1::GetServerInfoRequest* request,
                                          gemm::v1::ServerInfo* response) override;

  // From now on new requests get UNAVAILABLE; those already accepted still complete.
  void StartDraining() { draining_.store(true); }

  // Waits until no request is in flight or `deadline` passes; true when idle.
  bool AwaitIdle(absl::Time deadline);

 private:
  // A validated GEMM on its way to the executor, whichever RPC it came from.
  struct GemmCall {
    grpc::CallbackServerContext* context = nullptr;
    grpc::ServerUnaryReactor* reactor = nullptr;
    RpcMethod method = RpcMethod::kMatmul;
    PrecisionLabel label = PrecisionLabel::None();
    absl::Time accepted;
    // Host work on the operands before queueing (QuantizedMatmul's dequantization):
    // reported as part of copy_in, not as time in the queue.
    absl::Duration prepare;
    GemmProblem problem;
    GemmOperands operands;  // host memory valid until the job is answered
    std::shared_ptr<void> keep_alive;  // owns `operands` when the request does not
    // QuantizedMatmul served from the packed operands (Device::RunsQuantized).
    std::shared_ptr<const QuantizedOperands> quantized;
    std::string forced_kernel;
    std::vector<int64_t> output_shape;
    int64_t input_bytes = 0;
    int64_t output_bytes = 0;
  };

  void AddInflight(int delta);
  // Counts a GEMM RPC in flight and starts its record.
  GemmCall BeginGemm(grpc::CallbackServerContext* context, RpcMethod method);
  // Answers `call` with an error (nothing was queued).
  grpc::ServerUnaryReactor* Reject(const GemmCall& call, const absl::Status& status);
  // Sizes the result in `response`, queues the job and answers the RPC when it is done
  // (or at once if it cannot be queued).
  grpc::ServerUnaryReactor* SubmitGemm(const GemmCall& call, gemm::v1::MatmulResponse* response);
  // Records metrics, logs failures and finishes the RPC.
  void Answer(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
              RpcMethod method, PrecisionLabel precision, const absl::Status& status,
              absl::Time accepted);

  const ServiceSettings settings_;
  const std::vector<Device*> devices_;
  JobExecutor* const executor_;
  ServerMetrics* const metrics_;
  std::atomic<bool> draining_{false};
  absl::Mutex inflight_mu_;
  int64_t inflight_ ABSL_GUARDED_BY(inflight_mu_) = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_GEMM_SERVICE_H_
