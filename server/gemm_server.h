// The whole server: devices, executor, gRPC service (+ health, reflection), Prometheus
// exposer. Create() returns a started server; Shutdown() drains it gracefully.
//
// Errors from Create: INVALID_ARGUMENT (bad settings), FAILED_PRECONDITION (backend not
// available: no GPU, or a build without CUDA), UNAVAILABLE (a port could not be bound).
#ifndef GEMMD_SERVER_GEMM_SERVER_H_
#define GEMMD_SERVER_GEMM_SERVER_H_

#include <grpcpp/server.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/devices/backend.h"
#include "server/security/auth_tokens.h"
#include "server/security/tls_credentials.h"

namespace prometheus {
class Exposer;
}

namespace gemmd {

class Batcher;
class GemmServiceImpl;
class TensorStore;
class RegionTable;
class HostMemory;
class ServerMetrics;

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 50051;              // 0 = any free port (see GemmServer::port())
  // Also listen on this Unix domain socket ("" = not): gRPC's unix: transport, for
  // callers on the same machine (the same security as the TCP port: TLS when it has it).
  std::string unix_socket;
  int metrics_port = 9464;       // 0 = any free port, -1 = no metrics endpoint
  // Where /metrics listens; empty = `host`. Apart from gRPC so it can stay on a private
  // interface: it has no authentication.
  std::string metrics_host;
  // TLS on the gRPC port (--tls_*): off when no certificate is given.
  ServerTlsFiles tls;
  std::string backend = "auto";  // auto | cpu | cuda
  int64_t max_message_bytes = int64_t{512} << 20;
  int64_t max_elements = int64_t{1} << 27;
  uint32_t max_queue_size = 1024;
  absl::Duration shutdown_grace = absl::Seconds(30);
  // gRPC's max connection age; zero = unlimited (--max_connection_age_s).
  absl::Duration max_connection_age = absl::ZeroDuration();
  // Batching (docs/ARCHITECTURE.md, server/scheduling/batcher.h).
  uint32_t max_batch_size = 64;
  absl::Duration max_queue_delay = absl::Microseconds(100);
  // Hold a lone request for max_queue_delay even when a device is idle and no other
  // request is arriving (by default it launches at once then).
  bool wait_when_idle = false;
  // Host memory that requests hold, pooled result buffers included (HostMemory); 0 = no
  // cap.
  int64_t max_inflight_bytes = int64_t{4} << 30;
  // Result buffers kept between calls for reuse; 0 = none kept.
  int64_t message_pool_bytes = int64_t{1} << 30;
  // Memory gRPC's transports may hold for bytes on their way in (a grpc::ResourceQuota);
  // past it gRPC resets streams. 0 = DefaultGrpcBufferBytes(max_message_bytes).
  int64_t grpc_buffer_bytes = 0;
  // CPU backend: how many devices it serves as (--cpu_devices).
  int cpu_devices = 1;
  // CUDA backend.
  std::string devices = "all";            // all | comma list of ordinals
  int64_t device_memory_limit_bytes = 0;  // per GPU; 0 = 90% of its free memory
  std::string cuda_sync = "spin";         // how threads wait for a GPU: spin | blocking
  int cuda_lanes = 2;                     // batches one GPU runs at once (1 to 16)
  std::string grpc_args;  // extra gRPC arguments, "name=value,..." (--grpc_arg)
  // Resident tensors' cap (--tensor_store_bytes): -1 = a share of the devices' memory
  // (DefaultTensorStoreBytes), 0 = no store.
  int64_t tensor_store_bytes = -1;
  // Tenants' bearer tokens (--auth_tokens_file); empty = no authentication.
  std::string auth_tokens_file;
  // Per tenant (with authentication): host memory its GEMM calls hold, and its resident
  // tensors' bytes; 0 = no limit beyond the server's.
  int64_t tenant_max_inflight_bytes = 0;
  int64_t tenant_tensor_store_bytes = 0;
  // The tensor store's other limits (TensorStoreOptions): most tensors, most uploads one
  // tenant has open, how long an open tensor may wait with no part uploading.
  int64_t tensor_store_max_tensors = 16384;
  int64_t max_open_uploads = 64;
  absl::Duration part_upload_timeout = absl::Seconds(10);
  // The layout quantized tensors are kept in: auto | canonical | swap-ab
  // (QuantizedLayoutPolicy).
  std::string quantized_layout = "auto";
  // An upload stream that sends nothing for this long is ended (zero: never).
  absl::Duration upload_idle_timeout = absl::Seconds(10);
  // GetTensor copies its chunks out even of host memory, as on a GPU (for measuring).
  bool download_copies = false;
  // Requests up to this size are prepared on the completion-queue poller that read them,
  // larger ones on the preparer threads (-1: all on the pollers).
  int64_t prepare_inline_max_bytes = int64_t{1} << 20;
  // Requests one MatmulStream may have read and not yet answered.
  int stream_max_outstanding = 256;
  // Threads polling the completion queues every call is served on (0: half the cores,
  // 1 to 8).
  int call_queue_threads = 0;
  // Shared-memory regions (--shm, --shm_prefix, --shm_max_bytes, --shm_max_regions):
  // POSIX shared-memory objects whose names start with "/" + shm_prefix; all regions'
  // bytes together and the regions one tenant holds are capped.
  bool shm = true;
  std::string shm_prefix = "gemmd-";
  int64_t shm_max_bytes = int64_t{16} << 30;
  uint32_t shm_max_regions = 64;
};

inline constexpr char kGemmdVersion[] = "0.1.0";

// Room for two of the largest requests arriving at once, and never less than 64 MiB (the
// transports' own buffers live there too).
int64_t DefaultGrpcBufferBytes(int64_t max_message_bytes);

class GemmServer {
 public:
  static absl::StatusOr<std::unique_ptr<GemmServer>> Create(const ServerConfig& config);
  // Serves on the given backend instead of the configured one (tests inject fakes
  // here: a catalogue and devices of their own).
  static absl::StatusOr<std::unique_ptr<GemmServer>> CreateWithBackend(const ServerConfig& config,
                                                                       Backend backend);
  ~GemmServer();  // shuts down if still running

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  int64_t grpc_buffer_bytes() const { return grpc_buffer_bytes_; }
  const std::string& backend() const { return backend_.name; }
  ServerMetrics& metrics() { return *metrics_; }
  Batcher& executor() { return *executor_; }

  HostMemory& memory() { return *memory_; }
  // Null when the server keeps no resident tensors.
  TensorStore* store() { return store_.get(); }

  // Waits until every GEMM call taken so far is done and counted (its outcome is known a
  // moment after its client has it); false when `deadline` passed first.
  bool AwaitIdle(absl::Time deadline);

  // Reads the tokens file again (SIGHUP) and logs the outcome: tokens_reloaded (tenants,
  // tokens) or tokens_reload_failed (why; the tokens in use stay). No-op without one.
  // The resident tensors of tenants the new file no longer names are deleted (nobody
  // can reach them any more).
  absl::Status ReloadTokens();

  // Health NOT_SERVING and new calls of every method refused (UNAVAILABLE); calls taken
  // before (requests still arriving, uploads and downloads included) completed and their
  // responses sent (those still running when the grace period ends are cancelled),
  // devices drained: all within the grace period. Idempotent; thread-safe.
  void Shutdown();

 private:
  GemmServer() = default;

  ServerConfig config_;
  Backend backend_;
  int port_ = 0;
  int metrics_port_ = -1;
  int64_t grpc_buffer_bytes_ = 0;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<TokenAuthenticator> tokens_;
  // The TLS credentials and their rotation watch (null without TLS); outlives server_.
  std::unique_ptr<ServerTls> tls_;
  // Outlives the executor: queued jobs hold pins on its tensors.
  std::unique_ptr<TensorStore> store_;
  // Outlives the executor too: queued jobs hold regions (which need the devices, above).
  std::unique_ptr<RegionTable> regions_;
  std::unique_ptr<Batcher> executor_;
  // Shared with the result buffers gRPC still holds.
  std::shared_ptr<HostMemory> memory_;
  std::unique_ptr<GemmServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ = false;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_GEMM_SERVER_H_
