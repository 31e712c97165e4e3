// The gRPC face of the server: decode, call the core, map the status. Uses the callback
// API, so no gRPC thread ever waits for a GEMM: Matmul validates, allocates the result
// in the response, hands a Job to the executor and returns; the executor's completion
// finishes the RPC. Thread-safe.
#ifndef GEMMD_SERVER_GEMM_SERVICE_H_
#define GEMMD_SERVER_GEMM_SERVICE_H_

#include <atomic>
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
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const gemm::v1::GetServerInfoRequest* request,
                                          gemm::v1::ServerInfo* response) override;

  // From now on new requests get UNAVAILABLE; those already accepted still complete.
  void StartDraining() { draining_.store(true); }

  // Waits until no request is in flight or `deadline` passes; true when idle.
  bool AwaitIdle(absl::Time deadline);

 private:
  void AddInflight(int delta);
  // Records metrics, logs failures and finishes the RPC.
  void Answer(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
              RpcMethod method, std::optional<Precision> precision, const absl::Status& status,
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
