#include "server/gemm_server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <prometheus/exposer.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <exception>
#include <limits>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "proto/transport_arguments.h"
#include "server/devices/cpu/cpu_device.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "server/regions/region_table.h"
#include "server/port_probe.h"
#include "server/rpc/gemm_service.h"
#include "server/rpc/host_memory.h"
#include "server/scheduling/batcher.h"
#include "server/store/tensor_store.h"
#ifdef GEMM_HAVE_CUDA
#include "server/devices/cuda/cuda_device_pool.h"
#endif

namespace gemmd {
namespace {

constexpr char kServiceName[] = "gemm.v1.GemmService";

absl::Status CheckConfig(const ServerConfig& c) {
  if (c.port < 0 || c.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", c.port, " is not in [0, 65535]"));
  }
  if (c.metrics_port < -1 || c.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port ", c.metrics_port, " is not in [-1, 65535]"));
  }
  // gRPC keeps message sizes in an int: 2 GiB - 1 is the ceiling.
  if (c.max_message_bytes < 65536 || c.max_message_bytes > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("--max_message_bytes ", c.max_message_bytes,
                                                   " is not in [65536, ", INT_MAX, "]"));
  }
  if (c.max_elements < 1) {
    return absl::InvalidArgumentError("--max_elements must be >= 1");
  }
  if (c.max_queue_size < 1) {
    return absl::InvalidArgumentError("--max_queue_size must be >= 1");
  }
  if (c.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--shutdown_grace_s must be >= 0");
  }
  // gRPC takes milliseconds as an int.
  if (c.max_connection_age < absl::ZeroDuration() ||
      c.max_connection_age > absl::Milliseconds(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_connection_age_s must be in [0, ",
        absl::ToInt64Seconds(absl::Milliseconds(std::numeric_limits<int>::max())),
        "] (0 = unlimited)"));
  }
  if (c.max_batch_size < 1 || c.max_batch_size > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_batch_size ", c.max_batch_size, " is not in [1, 4096]"));
  }
  if (c.max_queue_delay < absl::ZeroDuration() || c.max_queue_delay > absl::Seconds(1)) {
    return absl::InvalidArgumentError("--max_queue_delay_us must be in [0, 1000000]");
  }
  if (c.message_pool_bytes < 0) {
    return absl::InvalidArgumentError("--message_pool_bytes must be >= 0 (0 = no pool)");
  }
  if (c.max_inflight_bytes < 0) {
    return absl::InvalidArgumentError("--max_inflight_bytes must be >= 0 (0 = no cap)");
  }
  if (c.grpc_buffer_bytes < 0) {
    return absl::InvalidArgumentError(
        "--grpc_buffer_bytes must be >= 0 (0 = twice --max_message_bytes, at least 64 MiB)");
  }
  if (c.cpu_devices < 1 || c.cpu_devices > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_devices=", c.cpu_devices, " is not in [1, 64]"));
  }
  if (c.cuda_sync != "blocking" && c.cuda_sync != "spin") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_sync=", c.cuda_sync, " is not one of blocking, spin"));
  }
  if (c.cuda_lanes < 1 || c.cuda_lanes > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_lanes=", c.cuda_lanes, " is not in [1, 16]"));
  }
  if (absl::Status s = CheckServerTlsFiles(c.tls); !s.ok()) return s;
  if (c.tenant_max_inflight_bytes < 0 || c.tenant_tensor_store_bytes < 0) {
    return absl::InvalidArgumentError(
        "--tenant_max_inflight_bytes and --tenant_tensor_store_bytes must be >= 0 (0 = no "
        "per-tenant limit)");
  }
  if ((c.tenant_max_inflight_bytes > 0 || c.tenant_tensor_store_bytes > 0) &&
      c.auth_tokens_file.empty()) {
    return absl::InvalidArgumentError(
        "--tenant_max_inflight_bytes and --tenant_tensor_store_bytes need --auth_tokens_file "
        "(tenants are named by their tokens)");
  }
  if (c.tensor_store_bytes < -1) {
    return absl::InvalidArgumentError(
        "--tensor_store_bytes must be -1 (a share of memory), 0 (no store) or a byte count");
  }
  if (c.tensor_store_max_tensors < 1) {
    return absl::InvalidArgumentError("--tensor_store_max_tensors must be >= 1");
  }
  if (c.max_open_uploads < 0) {
    return absl::InvalidArgumentError("--max_open_uploads must be >= 0 (0 = no limit)");
  }
  if (c.part_upload_timeout < absl::Seconds(1) || c.part_upload_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError("--part_upload_timeout_s must be in [1, 86400]");
  }
  if (c.quantized_layout != "auto" && c.quantized_layout != "canonical" &&
      c.quantized_layout != "swap-ab") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantized_layout must be auto, canonical or swap-ab; got '", c.quantized_layout, "'"));
  }
  if (c.upload_idle_timeout < absl::ZeroDuration() || c.upload_idle_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        "--upload_idle_timeout_s must be in [0, 86400] (0 = uploads never time out)");
  }
  if (c.prepare_inline_max_bytes < -1) {
    return absl::InvalidArgumentError(
        "--prepare_inline_max_bytes must be >= -1 (-1 = every request on gRPC's threads)");
  }
  if (c.stream_max_outstanding < 1 || c.stream_max_outstanding > 65536) {
    return absl::InvalidArgumentError("--stream_max_outstanding must be in [1, 65536]");
  }
  if (c.call_queue_threads < 0 || c.call_queue_threads > 64) {
    return absl::InvalidArgumentError(
        "--call_queue_threads must be in [0, 64] (0 = half the cores, 1 to 8)");
  }
  if (c.shm && (c.shm_prefix.empty() || c.shm_prefix.size() > 64 ||
                !std::all_of(c.shm_prefix.begin(), c.shm_prefix.end(), [](char ch) {
                  return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '.' ||
                         ch == '_' || ch == '-';
                }))) {
    return absl::InvalidArgumentError(
        "--shm_prefix must be 1-64 of [A-Za-z0-9._-] (shared-memory names start with \"/\" "
        "and it)");
  }
  if (c.shm_max_bytes < 1 || c.shm_max_regions < 1) {
    return absl::InvalidArgumentError(
        "--shm_max_bytes and --shm_max_regions must be >= 1 (--shm=off turns regions off)");
  }
  if (c.device_memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        "--device_memory_limit_bytes must be >= 0 (0 = 90% of free memory)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Backend> OpenBackend(const ServerConfig& config) {
  if (config.backend != "auto" && config.backend != "cpu" && config.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", config.backend, " is not one of auto, cpu, cuda"));
  }
#ifdef GEMM_HAVE_CUDA
  if (config.backend == "cuda" || (config.backend == "auto" && CudaDeviceCount() > 0)) {
    CudaDeviceOptions options;
    options.memory_limit_bytes = config.device_memory_limit_bytes;
    options.blocking_sync = config.cuda_sync == "blocking";
    options.lanes = config.cuda_lanes;
    options.resident_bytes = std::max<int64_t>(0, config.tensor_store_bytes);
    return OpenCudaBackend(config.devices, options);
  }
#else
  if (config.backend == "cuda") {
    return absl::FailedPreconditionError(
        "--backend=cuda: this gemm-server was built without CUDA (no nvcc at build time); "
        "use --backend=cpu or auto");
  }
#endif
  return OpenCpuBackend(config.cpu_devices);
}

// --tensor_store_bytes=-1: 40% of the GPUs' memory, or a quarter of the host's.
int64_t DefaultTensorStoreBytes(const std::vector<Device*>& devices) {
  int64_t gpu_bytes = 0;
  for (const Device* d : devices) {
    if (d->description().kind == "cuda") gpu_bytes += d->description().memory_bytes;
  }
  if (gpu_bytes > 0) return gpu_bytes / 10 * 4;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size / 4
                                    : int64_t{1} << 30;
}

}  // namespace

int64_t DefaultGrpcBufferBytes(int64_t max_message_bytes) {
  return std::max<int64_t>(2 * max_message_bytes, int64_t{64} << 20);
}

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::Create(const ServerConfig& config) {
  if (absl::Status s = CheckConfig(config); !s.ok()) return s;
  absl::StatusOr<Backend> backend = OpenBackend(config);
  if (!backend.ok()) return backend.status();
  return CreateWithBackend(config, *std::move(backend));
}

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::CreateWithBackend(
    const ServerConfig& config, Backend backend) {
  if (absl::Status s = CheckConfig(config); !s.ok()) return s;
  if (backend.devices.empty()) return absl::InvalidArgumentError("no devices to serve on");
  if (backend.catalogue == nullptr) return absl::InvalidArgumentError("no kernel catalogue");
  std::unique_ptr<GemmServer> server(new GemmServer());
  server->config_ = config;
  server->backend_ = std::move(backend);
  std::vector<Device*> devices;
  for (auto& d : server->backend_.devices) devices.push_back(d.get());

  std::vector<int> device_labels;
  for (const Device* d : devices) device_labels.push_back(d->description().index);
  server->metrics_ = std::make_unique<ServerMetrics>(device_labels);
  const int64_t store_bytes = config.tensor_store_bytes >= 0 ? config.tensor_store_bytes
                                                            : DefaultTensorStoreBytes(devices);
  if (store_bytes > 0) {
    TensorStoreOptions store;
    store.cap_bytes = store_bytes;
    store.tenant_cap_bytes = config.tenant_tensor_store_bytes;
    store.max_tensors = config.tensor_store_max_tensors;
    store.max_open_uploads = config.max_open_uploads;
    store.part_upload_timeout = config.part_upload_timeout;
    store.quantized_layout = config.quantized_layout == "canonical"
                                 ? QuantizedLayoutPolicy::kCanonical
                             : config.quantized_layout == "swap-ab" ? QuantizedLayoutPolicy::kSwapAb
                                                                    : QuantizedLayoutPolicy::kAuto;
    server->store_ = std::make_unique<TensorStore>(store, devices, server->metrics_.get());
  }
  if (config.shm) {
    RegionSettings regions;
    regions.prefix = config.shm_prefix;
    regions.max_bytes = config.shm_max_bytes;
    regions.max_regions = config.shm_max_regions;
    // Page-locked once for every device (cudaHostRegisterPortable): the first device's
    // call does it.
    Device* pinner = devices.front();
    regions.pinning.pin = [pinner](void* memory, size_t bytes) {
      return pinner->PinHost(memory, bytes);
    };
    regions.pinning.unpin = [pinner](void* memory) { pinner->UnpinHost(memory); };
    server->regions_ = std::make_unique<RegionTable>(std::move(regions), server->metrics_.get());
  }
  Batcher::Options batching;
  batching.max_batch_size = config.max_batch_size;
  batching.max_queue_delay = config.max_queue_delay;
  batching.max_queue_size = config.max_queue_size;
  batching.wait_when_idle = config.wait_when_idle;
  // A stack of jobs against one resident B runs on the backend's kernel for its M.
  batching.catalogue = server->backend_.catalogue.get();
  server->executor_ =
      std::make_unique<Batcher>(devices, batching, server->metrics_.get());
  server->memory_ = HostMemory::Create(config.max_inflight_bytes, config.message_pool_bytes,
                                       /*max_pooled_buffers=*/256,
                                       server->backend_.host_allocator);

  ServiceSettings settings;
  settings.version = kGemmdVersion;
  settings.backend = server->backend_.name;
  settings.limits = {config.max_message_bytes, config.max_elements};
  settings.max_queue_size = config.max_queue_size;
  settings.max_batch_size = config.max_batch_size;
  settings.max_queue_delay = config.max_queue_delay;
  settings.max_inflight_bytes = config.max_inflight_bytes;
  settings.tenant_max_inflight_bytes = config.tenant_max_inflight_bytes;
  settings.upload_idle_timeout = config.upload_idle_timeout;
  settings.download_copies = config.download_copies;
  settings.prepare_inline_max_bytes = config.prepare_inline_max_bytes;
  settings.stream_max_outstanding = config.stream_max_outstanding;
  if (!config.auth_tokens_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenAuthenticator>> tokens =
        TokenAuthenticator::FromFile(config.auth_tokens_file);
    if (!tokens.ok()) return tokens.status();
    server->tokens_ = *std::move(tokens);
  }
  server->service_ = std::make_unique<GemmServiceImpl>(
      settings, devices, server->backend_.catalogue.get(), server->executor_.get(),
      server->metrics_.get(), server->memory_, server->store_.get(), server->tokens_.get(),
      server->regions_.get());
  server->executor_->SetArriving(server->service_->arriving());

  const std::string& metrics_host = config.metrics_host.empty() ? config.host : config.metrics_host;
  if (config.metrics_port >= 0) {
    const std::string address = absl::StrCat(metrics_host, ":", config.metrics_port);
    // civetweb gives each connection a worker thread until it has sent its request: with
    // few threads and the default 30 s request timeout, two idle connections stalled every
    // scrape for ~30 s. More workers, and a request timeout a scraper never comes near
    // (it sends its GET on connect).
    const std::vector<std::string> options = {"listening_ports", address, "num_threads", "8",
                                              "request_timeout_ms", "2000"};
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options);
    } catch (const std::exception& e) {
      const std::string why = WhyCannotListen(metrics_host, config.metrics_port);
      return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ",
                                                 why.empty() ? std::string(e.what()) : why));
    }
    server->exposer_->RegisterCollectable(server->metrics_->registry());
    const std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_port_ = ports.empty() ? -1 : ports.front();
  }

  // Health is served on the call queues (health_service.h), not by gRPC's own service.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(config.host, ":", config.port);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (config.tls.enabled()) {
    absl::StatusOr<std::unique_ptr<ServerTls>> tls = ServerTls::Start(config.tls);
    if (!tls.ok()) return tls.status();
    server->tls_ = *std::move(tls);
    credentials = server->tls_->credentials();
  }
  builder.AddListeningPort(address, credentials, &server->port_);
  if (!config.unix_socket.empty()) {
    if (const std::string why = WhyCannotListenUnix(config.unix_socket); !why.empty()) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve gRPC on unix:", config.unix_socket, ": ", why));
    }
    builder.AddListeningPort(absl::StrCat("unix:", config.unix_socket), credentials);
  }
  // gRPC would otherwise let a second server bind the same port (SO_REUSEPORT) and take
  // half the traffic without a word.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (config.max_connection_age > absl::ZeroDuration()) {
    // No grace limit: calls in flight (a long upload among them) finish on the old
    // connection; only new calls move.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(absl::ToInt64Milliseconds(config.max_connection_age)));
  }
  absl::StatusOr<GrpcArgs> grpc_args = ParseGrpcArgs(config.grpc_args);
  if (!grpc_args.ok()) return grpc_args.status();
  SetTransportArguments(&builder, *grpc_args);
  // Matmul and QuantizedMatmul check their size themselves once read (so a refusal is
  // counted and says which flag); gRPC's own check would come no earlier.
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  // What bounds the bytes gRPC buffers for requests on their way in: past the quota its
  // transports reset streams (RESOURCE_EXHAUSTED), so one oversize message or a crowd of
  // large ones cannot make the server read them all into memory first.
  server->grpc_buffer_bytes_ = config.grpc_buffer_bytes > 0
                                   ? config.grpc_buffer_bytes
                                   : DefaultGrpcBufferBytes(config.max_message_bytes);
  grpc::ResourceQuota quota("gemmd");
  quota.Resize(static_cast<size_t>(server->grpc_buffer_bytes_));
  builder.SetResourceQuota(quota);
  const int queue_threads =
      config.call_queue_threads > 0
          ? config.call_queue_threads
          : std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 2, 1, 8);
  server->service_->AddTo(&builder, queue_threads);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    const std::string why = WhyCannotListen(config.host, config.port);
    const std::string where =
        config.unix_socket.empty() ? address
                                   : absl::StrCat(address, " and unix:", config.unix_socket);
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", where, ": ",
                     why.empty() ? std::string("gRPC could not listen there (see its log)") : why));
  }
  server->service_->Start();
  // Health answers for the server ("") and for the service by its name, as probes ask
  // either way.
  server->service_->health().Set("", true);
  server->service_->health().Set(kServiceName, true);
  // With every device faulted the server can answer nothing: tell health checkers, so a
  // balancer stops sending work here (requests meanwhile get UNAVAILABLE).
  HealthStatus* health = &server->service_->health();
  server->executor_->SetOnNoHealthyDevice([health] {
    Log(LogLevel::kError, "no_healthy_device", {{"health", "NOT_SERVING"}});
    health->SetAll(false);
  });

  std::vector<std::string> device_names;
  for (const Device* d : devices) device_names.push_back(d->description().name);
  Log(LogLevel::kInfo, "server_started",
      {{"version", kGemmdVersion},
       {"backend", server->backend_.name},
       {"devices", absl::StrJoin(device_names, "; ")},
       {"cuda_sync", server->backend_.name == "cuda" ? config.cuda_sync : std::string("-")},
       {"cuda_lanes",
        server->backend_.name == "cuda" ? absl::StrCat(config.cuda_lanes) : std::string("-")},
       {"call_queue_threads", absl::StrCat(queue_threads)},
       {"grpc", absl::StrCat(config.host, ":", server->port_)},
       {"metrics", server->metrics_port_ >= 0
                       ? absl::StrCat(metrics_host, ":", server->metrics_port_, "/metrics")
                       : std::string("off")},
       {"unix_socket", config.unix_socket.empty() ? std::string("off") : config.unix_socket},
       {"auth", server->tokens_ == nullptr
                    ? std::string("off")
                    : absl::StrCat("tokens (", server->tokens_->tenants().size(), " tenants)")},
       {"tls", !config.tls.enabled()               ? "off"
               : config.tls.client_ca_file.empty() ? "on"
                                                   : "mutual"},
       {"max_message_bytes", absl::StrCat(config.max_message_bytes)},
       {"max_elements", absl::StrCat(config.max_elements)},
       {"max_queue_size", absl::StrCat(config.max_queue_size)},
       {"max_batch_size", absl::StrCat(config.max_batch_size)},
       {"max_queue_delay_us", absl::StrCat(absl::ToInt64Microseconds(config.max_queue_delay))},
       {"wait_when_idle", config.wait_when_idle ? "true" : "false"},
       {"max_inflight_bytes", absl::StrCat(config.max_inflight_bytes)},
       {"message_pool_bytes", absl::StrCat(config.message_pool_bytes)},
       {"grpc_buffer_bytes", absl::StrCat(server->grpc_buffer_bytes_)},
       {"max_connection_age_s", absl::StrCat(absl::ToDoubleSeconds(config.max_connection_age))},
       {"tensor_store_bytes", absl::StrCat(store_bytes)},
       {"tensor_store_max_tensors", absl::StrCat(config.tensor_store_max_tensors)},
       {"max_open_uploads", absl::StrCat(config.max_open_uploads)},
       {"upload_idle_timeout_s", absl::StrCat(absl::ToDoubleSeconds(config.upload_idle_timeout))},
       {"part_upload_timeout_s", absl::StrCat(absl::ToDoubleSeconds(config.part_upload_timeout))},
       {"shm", config.shm ? absl::StrCat("/", config.shm_prefix, "*") : std::string("off")},
       {"shm_max_bytes", absl::StrCat(config.shm_max_bytes)},
       {"shm_max_regions", absl::StrCat(config.shm_max_regions)},
       {"instance", server->store_ != nullptr ? server->store_->instance() : "-"}});
  return server;
}

bool GemmServer::AwaitIdle(absl::Time deadline) { return service_->AwaitIdle(deadline); }

absl::Status GemmServer::ReloadTokens() {
  if (tokens_ == nullptr) {
    Log(LogLevel::kInfo, "tokens_reload_skipped", {{"why", "no --auth_tokens_file"}});
    return absl::OkStatus();
  }
  const absl::Status status = tokens_->Reload();
  if (status.ok()) {
    const int64_t dropped =
        store_ != nullptr ? store_->DropTenantsOtherThan(tokens_->tenants()) : 0;
    Log(LogLevel::kInfo, "tokens_reloaded",
        {{"file", tokens_->path()},
         {"tenants", absl::StrJoin(tokens_->tenants(), ",")},
         {"tensors_of_removed_tenants_deleted", absl::StrCat(dropped)}});
  } else {
    Log(LogLevel::kError, "tokens_reload_failed",
        {{"message", std::string(status.message())}, {"kept", "the tokens in use"}});
  }
  return status;
}

void GemmServer::Shutdown() {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  const absl::Time start = absl::Now();
  const absl::Time grace_end = start + config_.shutdown_grace;
  Log(LogLevel::kInfo, "shutdown_started",
      {{"grace_s", absl::StrCat(absl::ToDoubleSeconds(config_.shutdown_grace))}});
  // Refuse new work (UNAVAILABLE, which clients and balancers retry elsewhere) before
  // advertising NOT_SERVING, so a client that sees NOT_SERVING knows no later request
  // of its will be accepted. A call whose headers came before is served to its end, its
  // request still arriving included (one rule for every method; a client cannot retry a
  // large request it has half sent). gRPC keeps its listener open meanwhile: closing it
  // first would answer late arrivals with CANCELLED.
  service_->StartDraining();
  service_->health().SetAll(false);
  // Calls of several RPCs (striped calls) begun before are served to their end too.
  const bool idle = service_->AwaitDrained(grace_end);
  if (!idle) Log(LogLevel::kWarning, "shutdown_grace_expired", {});
  // Every call is done, its response sent. gRPC's own shutdown turns away calls that
  // arrive before its clients have heard its GOAWAY, and those get CANCELLED, which says
  // the wrong thing (clients retry UNAVAILABLE, not CANCELLED). So first let clients
  // hear UNAVAILABLE and NOT_SERVING and stop: wait until none has arrived for a moment
  // (within the grace period).
  if (idle) service_->AwaitQuiet(absl::Milliseconds(100), grace_end);
  // What is left in gRPC are quick unary calls and the connections; a client that does not
  // answer the GOAWAY's ping would hold them 20 s, so after a second (or past the grace
  // period, at once) gRPC cancels what is left and closes them.
  // Health watches stay open for as long as their clients: they end here, after their
  // NOT_SERVING, so gRPC's shutdown need not wait for them.
  service_->health().Shutdown();
  server_->Shutdown(absl::ToChronoTime(
      idle ? std::min(grace_end, absl::Now() + absl::Seconds(1)) : absl::Now()));
  executor_->Drain();
  server_->Wait();
  service_->Stop();  // every call is over: gRPC needs its queues no more
  if (regions_ != nullptr) regions_->Clear();
  Log(LogLevel::kInfo, "shutdown_complete",
      {{"took_ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - start))}});
}

GemmServer::~GemmServer() {
  if (server_ != nullptr) {
    Shutdown();
    return;
  }
  // A start that failed (a port taken, say): the executor's threads already run and read
  // the service (its count of calls arriving), which goes before the executor does (the
  // members' order). Stop them first.
  if (executor_ != nullptr) executor_->Drain();
}

}  // namespace gemmd
