// The gRPC face of the server: every call of every method (gemm.v1.GemmService and
// grpc.health.v1.Health) arrives on the completion queues (call_queues.h) as raw bytes and
// is routed here by its method to the reactor that serves it (queued_call.h says why
// not gRPC's callback API): Matmul and QuantizedMatmul to a GemmCall, MatmulStream,
// PutTensor and GetTensor to a MatmulStreamCall, TensorUploadCall or TensorDownloadCall,
// the others to a UnaryCall that parses its own request (raw_messages.h), so a request
// protobuf refuses is answered, counted and logged like any other failure. No gRPC
// thread ever waits for a GEMM.
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

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "server/regions/region_table.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/call_queues.h"
#include "server/rpc/call_registry.h"
#include "server/rpc/call_report.h"
#include "server/rpc/gemm_call.h"
#include "server/rpc/health_service.h"
#include "server/rpc/host_memory.h"
#include "server/rpc/matmul_validation.h"
#include "server/rpc/registered_unary_call.h"
#include "server/rpc/tensor_call_environment.h"
#include "server/rpc/upload_watch.h"
#include "server/scheduling/job_executor.h"
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

// What gRPC is told of the services: GetServerInfo and health's Check registered
// (raw, on the queues), every other method generic.
using GemmService = gemm::v1::GemmService;
using ListedGemmService = GemmService::WithRawMethod_GetServerInfo<
    GemmService::WithGenericMethod_Matmul<GemmService::WithGenericMethod_QuantizedMatmul<
        GemmService::WithGenericMethod_MatmulStream<GemmService::WithGenericMethod_PutTensor<
            GemmService::WithGenericMethod_GetTensor<GemmService::WithGenericMethod_DeleteTensor<
                GemmService::WithGenericMethod_ListTensors<
                    GemmService::WithGenericMethod_RegisterRegion<
                        GemmService::WithGenericMethod_UnregisterRegion<
                            GemmService::WithGenericMethod_ListRegions<
                                GemmService::Service>>>>>>>>>>>;
using ListedHealthService = grpc::health::v1::Health::WithRawMethod_Check<
    grpc::health::v1::Health::WithGenericMethod_Watch<grpc::health::v1::Health::Service>>;

class GemmServiceImpl final : public CallRouter {
 public:
  // `devices`, `catalogue`, `executor`, `metrics`, `store` (null: no resident tensors),
  // `tokens` (null: no authentication) and `regions` (null: no shared-memory regions)
  // must outlive the service; `memory` is shared with the result buffers in flight.
  GemmServiceImpl(ServiceSettings settings, std::vector<Device*> devices,
                  const KernelCatalogue* catalogue, JobExecutor* executor, ServerMetrics* metrics,
                  std::shared_ptr<HostMemory> memory, TensorStore* store = nullptr,
                  const TokenAuthenticator* tokens = nullptr, RegionTable* regions = nullptr);
  ~GemmServiceImpl() override;

  // Every call: AddTo the builder (with `threads` queues), Start once the server is,
  // Stop after its Shutdown (call_queues.h).
  void AddTo(grpc::ServerBuilder* builder, int threads);
  void Start();
  void Stop() { call_queues_.Stop(); }

  // What grpc.health.v1 answers (the server sets it).
  HealthStatus& health() { return health_; }

  // CallRouter: each call to its reactor by its method (UNIMPLEMENTED for one this
  // server does not have).
  void Route(QueuedCall* call) override;

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
  // A small unary method: `serve` runs on the request of a known tenant, and the call
  // is counted and (when it failed) logged.
  using ServeUnary = absl::Status (GemmServiceImpl::*)(const grpc::ServerContextBase& context,
                                                       const std::string& tenant,
                                                       const grpc::ByteBuffer& request,
                                                       grpc::ByteBuffer* response);
  UnaryCall::Serve ServingOf(RpcMethod method, ServeUnary serve);

  // How Route serves each GemmService method (GetServerInfo is registered apart; health's
  // Watch is routed before the table).
  enum class Served { kGemm, kStream, kPut, kGet, kUnary };
  struct MethodRoute {
    Served served;
    RpcMethod method;
    const char* request_type = nullptr;  // kUnary: for UnaryCall
    UnaryCall::Serve serve;              // kUnary
  };
  absl::Status GetServerInfo(const grpc::ServerContextBase& context, const std::string& tenant,
                             const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  absl::Status DeleteTensor(const grpc::ServerContextBase& context, const std::string& tenant,
                            const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  absl::Status ListTensors(const grpc::ServerContextBase& context, const std::string& tenant,
                           const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  // Shared-memory regions (region_service.cc).
  absl::Status RegisterRegion(const grpc::ServerContextBase& context, const std::string& tenant,
                              const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  absl::Status UnregisterRegion(const grpc::ServerContextBase& context, const std::string& tenant,
                                const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  absl::Status ListRegions(const grpc::ServerContextBase& context, const std::string& tenant,
                           const grpc::ByteBuffer& request, grpc::ByteBuffer* response);
  // What the region methods check first: the server is open and has regions.
  absl::Status RegionsOpen();
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
  // Prepare large requests off the queues' threads (GemmCallEnvironment::preparers).
  ThreadPool preparers_{4, "gemmd-prepare"};
  UploadWatch upload_watch_;
  GemmCallEnvironment environment_;
  const GemmCallSetup gemm_setup_{&environment_, &auth_};
  TensorCallEnvironment tensor_environment_;
  HealthStatus health_;
  // One method of each service registered with gRPC, so that reflection lists them
  // (registered_unary_call.h); every other method goes to the generic service.
  ListedGemmService listed_gemm_;
  ListedHealthService listed_health_;
  RegisteredUnaryCall::Method server_info_;
  RegisteredUnaryCall::Method health_check_;
  // By method name; built once, read by the pollers.
  absl::flat_hash_map<std::string, MethodRoute> routes_;
  CallQueues call_queues_{this};
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_SERVICE_H_
