// The gRPC face of the server. Matmul and QuantizedMatmul go through gRPC's async generic
// service, one GemmCall per call on the completion queues of gemm_call_queues.h
// (gemm_call.h says why); the other methods through the generated callback API, raw:
// MatmulStream and PutTensor as one MatmulStreamCall or TensorUploadCall per call, and
// each of the others parsing its own request (raw_messages.h), so a request protobuf
// refuses is answered, counted and logged like any other failure. No gRPC thread ever
// waits for a GEMM.
//
// Draining (shutdown): every method refuses calls that arrive after StartDraining
// (UNAVAILABLE) and serves those that arrived before to their end. Thread-safe.
#ifndef GEMMD_SERVER_RPC_GEMM_SERVICE_H_
#define GEMMD_SERVER_RPC_GEMM_SERVICE_H_

#include <grpcpp/server_builder.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/call_registry.h"
#include "server/rpc/call_report.h"
#include "server/rpc/gemm_call_queues.h"
#include "server/rpc/host_memory.h"
#include "server/rpc/matmul_validation.h"
#include "server/rpc/tensor_call_environment.h"
#include "server/rpc/upload_watch.h"
#include "server/scheduling/job_executor.h"
#include "server/regions/region_table.h"
#include "server/store/tensor_store.h"

namespace gemmd {

struct ServiceSettings {
  std::string version;
  std::string backend;  // "cpu" or "cuda"
  ValidationLimits limits;
  uint32_t max_queue_size = 0;
  uint32_t max_batch_size = 1;
  absl::Duration max_queue_delay;
  int64_t max_inflight_bytes = 0;
  int64_t tenant_max_inflight_bytes = 0;  // 0: no per-tenant cap
  // An upload that sends nothing for this long is ended (zero: never).
  absl::Duration upload_idle_timeout = absl::Seconds(10);
  bool download_copies = false;  // TensorCallEnvironment::copy_downloads
  int64_t prepare_inline_max_bytes = int64_t{1} << 20;  // GemmCallEnvironment's
  int stream_max_outstanding = 256;                      // GemmCallEnvironment's
};

// Every method but Matmul and QuantizedMatmul served by the generated code, raw (gRPC
// does not parse their messages: the tensors are read from the received bytes); those
// two are left to the async generic service (GemmCallQueues), marked generic here.
using GemmService = gemm::v1::GemmService;
using GemmTypedService = GemmService::WithRawCallbackMethod_MatmulStream<
    GemmService::WithGenericMethod_Matmul<GemmService::WithGenericMethod_QuantizedMatmul<
        GemmService::WithRawCallbackMethod_PutTensor<GemmService::WithRawCallbackMethod_GetTensor<
            GemmService::WithRawCallbackMethod_DeleteTensor<
                GemmService::WithRawCallbackMethod_ListTensors<
                    GemmService::WithRawCallbackMethod_RegisterRegion<
                        GemmService::WithRawCallbackMethod_UnregisterRegion<
                            GemmService::WithRawCallbackMethod_ListRegions<
                                GemmService::WithRawCallbackMethod_GetServerInfo<
                                    GemmService::Service>>>>>>>>>>>;

class GemmServiceImpl final : public GemmTypedService {
 public:
  // `devices`, `catalogue`, `executor`, `metrics`, `store` (null: no resident tensors),
  // `tokens` (null: no authentication) and `regions` (null: no shared-memory regions)
  // must outlive the service; `memory` is shared with the result buffers in flight.
  GemmServiceImpl(ServiceSettings settings, std::vector<Device*> devices,
                  const KernelCatalogue* catalogue, JobExecutor* executor, ServerMetrics* metrics,
                  std::shared_ptr<HostMemory> memory, TensorStore* store = nullptr,
                  const TokenAuthenticator* tokens = nullptr, RegionTable* regions = nullptr);
  ~GemmServiceImpl() override;

  // Matmul and QuantizedMatmul: AddTo the builder beside the service, Start once the
  // server is, Stop after its Shutdown (gemm_call_queues.h).
  GemmCallQueues& call_queues() { return call_queues_; }

  // Many Matmuls on one stream (matmul_stream_call.h).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* MatmulStream(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;

  // Resident tensors (PutTensor: tensor_upload_call.h; GetTensor: tensor_download_call.h).
  grpc::ServerReadReactor<grpc::ByteBuffer>* PutTensor(grpc::CallbackServerContext* context,
                                                       grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GetTensor(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* DeleteTensor(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListTensors(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  // Shared-memory regions (region_service.cc).
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* context,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  // From now on new calls of every method get UNAVAILABLE at once; calls already taken
  // (a request still arriving included) run to their end.
  void StartDraining() { registry_.StartDraining(); }

  // Waits until every call taken is done (its response sent, or the call abandoned) or
  // `deadline` passes; true when all are.
  bool AwaitIdle(absl::Time deadline) { return registry_.AwaitEmpty(deadline); }

  // AwaitIdle, and also until no call of several RPCs is left midway (no temporary
  // tensor remains: call_continuation.h), since each may bring another RPC; true when
  // both hold before `deadline`.
  bool AwaitDrained(absl::Time deadline);

  // Calls admitted at their headers whose job is not queued yet (for the batcher: while
  // none is on its way, an idle device need not wait for company).
  const std::atomic<int64_t>* arriving() const { return &arriving_; }

  // Waits until no call has been refused for draining in the last `quiet`, or
  // `deadline`; true when quiet.
  bool AwaitQuiet(absl::Duration quiet, absl::Time deadline) {
    return registry_.AwaitQuiet(quiet, deadline);
  }

 private:
  // A unary call's end: counted, logged when it failed, answered.
  void FinishUnary(grpc::ServerUnaryReactor* reactor, const grpc::CallbackServerContext& context,
                   RpcMethod method, const std::string& tenant, const absl::Status& status,
                   absl::Time accepted);
  // One region RPC: its tenant, `serve` run unless the server drains, counted, answered.
  template <typename Serve>
  grpc::ServerUnaryReactor* ServeRegionCall(grpc::CallbackServerContext* context,
                                            RpcMethod method, Serve serve);
  absl::Status ListTensorsOf(const std::string& tenant, const grpc::ByteBuffer& request,
                             absl::Time now, grpc::ByteBuffer* response);
  void DescribeServer(gemm::v1::ServerInfo* info) const;

  const ServiceSettings settings_;
  const std::vector<Device*> devices_;
  const KernelCatalogue* const catalogue_;
  ServerMetrics* const metrics_;
  const std::shared_ptr<HostMemory> memory_;
  TensorStore* const store_;
  RegionTable* const regions_;
  CallRegistry registry_;
  // At most 20 request_failed lines at once and 10 a second after that.
  LogRateLimiter failure_log_{10, 20};
  const CallReporter reporter_{metrics_, &failure_log_};
  const CallAuth auth_;
  // Shared with the download chunks gRPC still holds.
  std::shared_ptr<TenantBudget> tenant_budget_;
  std::atomic<int64_t> arriving_{0};
  // Copies large payloads off the wire (PlacePayloads) with a few helper threads.
  HostCopier copier_{3};
  // Prepare large requests off gRPC's callback threads (GemmCallEnvironment::preparers).
  ThreadPool preparers_{4};
  UploadWatch upload_watch_;
  GemmCallEnvironment environment_;
  TensorCallEnvironment tensor_environment_;
  GemmCallQueues call_queues_{&environment_, &auth_};
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_SERVICE_H_
