#include "server/gemm_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <prometheus/exposer.h>

#include <climits>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/cpu_device.h"
#include "server/batcher.h"
#include "server/gemm_service.h"
#include "server/log.h"
#include "server/matmul_message_pool.h"
#include "server/metrics.h"
#ifdef GEMM_HAVE_CUDA
#include "server/cuda/cuda_device_pool.h"
#endif

namespace gemmd {
namespace {

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
  if (c.inject_fault_kind != "trap" && c.inject_fault_kind != "launch_error") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject_fault_kind=", c.inject_fault_kind, " is not one of trap, launch_error"));
  }
  if (c.device_memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        "--device_memory_limit_bytes must be >= 0 (0 = 90% of free memory)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenBackend(const ServerConfig& config,
                                                                std::string* backend) {
  std::vector<std::unique_ptr<Device>> devices;
  if (config.backend != "auto" && config.backend != "cpu" && config.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend=", config.backend, " is not one of auto, cpu, cuda"));
  }
#ifdef GEMM_HAVE_CUDA
  if (config.backend == "cuda" || (config.backend == "auto" && CudaDeviceCount() > 0)) {
    CudaDeviceOptions options;
    options.memory_limit_bytes = config.device_memory_limit_bytes;
    options.fault_after_batches = config.inject_fault_after_batches;
    options.fault_is_trap = config.inject_fault_kind == "trap";
    absl::StatusOr<std::vector<std::unique_ptr<Device>>> gpus =
        OpenCudaDevices(config.devices, options);
    if (!gpus.ok()) return gpus.status();
    *backend = "cuda";
    return gpus;
  }
#else
  if (config.backend == "cuda") {
    return absl::FailedPreconditionError(
        "--backend=cuda: this gemm-server was built without CUDA (no nvcc at build time); "
        "use --backend=cpu or auto");
  }
#endif
  *backend = "cpu";
  devices.push_back(std::make_unique<CpuDevice>(0));
  return devices;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::Create(const ServerConfig& config) {
  if (absl::Status s = CheckConfig(config); !s.ok()) return s;
  std::string backend;
  absl::StatusOr<std::vector<std::unique_ptr<Device>>> devices = OpenBackend(config, &backend);
  if (!devices.ok()) return devices.status();
  return CreateWithDevices(config, backend, *std::move(devices));
}

absl::StatusOr<std::unique_ptr<GemmServer>> GemmServer::CreateWithDevices(
    const ServerConfig& config, std::string backend_name,
    std::vector<std::unique_ptr<Device>> owned_devices) {
  if (absl::Status s = CheckConfig(config); !s.ok()) return s;
  if (owned_devices.empty()) return absl::InvalidArgumentError("no devices to serve on");
  std::unique_ptr<GemmServer> server(new GemmServer());
  server->config_ = config;
  server->backend_ = std::move(backend_name);
  server->devices_ = std::move(owned_devices);
  std::vector<Device*> devices;
  for (auto& d : server->devices_) devices.push_back(d.get());

  std::vector<int> device_labels;
  for (const Device* d : devices) device_labels.push_back(d->description().index);
  server->metrics_ = std::make_unique<ServerMetrics>(device_labels);
  Batcher::Options batching;
  batching.max_batch_size = config.max_batch_size;
  batching.max_queue_delay = config.max_queue_delay;
  batching.max_queue_size = config.max_queue_size;
  batching.max_inflight_bytes = config.max_inflight_bytes;
  server->executor_ =
      std::make_unique<Batcher>(devices, batching, server->metrics_.get());
  for (size_t i = 0; i < devices.size(); ++i) {
    server->metrics_->SetDeviceMemory(static_cast<int>(i), devices[i]->memory());
    server->metrics_->SetDeviceHealthy(static_cast<int>(i), devices[i]->healthy());
  }

  ServiceSettings settings;
  settings.version = kGemmdVersion;
  settings.backend = server->backend_;
  settings.limits = {config.max_message_bytes, config.max_elements};
  settings.max_queue_size = config.max_queue_size;
  settings.max_batch_size = config.max_batch_size;
  settings.max_queue_delay = config.max_queue_delay;
  settings.max_inflight_bytes = config.max_inflight_bytes;
  server->service_ = std::make_unique<GemmServiceImpl>(settings, devices, server->executor_.get(),
                                                       server->metrics_.get());
  if (config.message_pool_bytes > 0) {
    server->pooled_result_bytes_ =
        std::make_unique<RetainedResultBytes>(config.message_pool_bytes);
    server->matmul_pool_ = std::make_unique<MatmulMessagePool<gemm::v1::MatmulRequest>>(
        server->pooled_result_bytes_.get(), /*max_messages=*/256);
    server->quantized_pool_ =
        std::make_unique<MatmulMessagePool<gemm::v1::QuantizedMatmulRequest>>(
            server->pooled_result_bytes_.get(), /*max_messages=*/256);
    server->service_->SetMessageAllocatorFor_Matmul(server->matmul_pool_.get());
    server->service_->SetMessageAllocatorFor_QuantizedMatmul(server->quantized_pool_.get());
  }

  if (config.metrics_port >= 0) {
    const std::string address = absl::StrCat(config.host, ":", config.metrics_port);
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
    }
    server->exposer_->RegisterCollectable(server->metrics_->registry());
    const std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_port_ = ports.empty() ? -1 : ports.front();
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(config.host, ":", config.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &server->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", address));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  // With every device faulted the server can answer nothing: tell health checkers, so a
  // balancer stops sending work here (requests meanwhile get UNAVAILABLE).
  grpc::Server* grpc_server = server->server_.get();
  server->executor_->SetOnNoHealthyDevice([grpc_server] {
    Log(LogLevel::kError, "no_healthy_device", {{"health", "NOT_SERVING"}});
    grpc_server->GetHealthCheckService()->SetServingStatus(false);
  });

  std::vector<std::string> device_names;
  for (const Device* d : devices) device_names.push_back(d->description().name);
  Log(LogLevel::kInfo, "server_started",
      {{"version", kGemmdVersion},
       {"backend", server->backend_},
       {"devices", absl::StrJoin(device_names, "; ")},
       {"grpc", absl::StrCat(config.host, ":", server->port_)},
       {"metrics", server->metrics_port_ >= 0
                       ? absl::StrCat(config.host, ":", server->metrics_port_, "/metrics")
                       : std::string("off")},
       {"max_message_bytes", absl::StrCat(config.max_message_bytes)},
       {"max_elements", absl::StrCat(config.max_elements)},
       {"max_queue_size", absl::StrCat(config.max_queue_size)},
       {"max_batch_size", absl::StrCat(config.max_batch_size)},
       {"max_queue_delay_us", absl::StrCat(absl::ToInt64Microseconds(config.max_queue_delay))},
       {"max_inflight_bytes", absl::StrCat(config.max_inflight_bytes)}});
  return server;
}

void GemmServer::Shutdown() {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  const absl::Time start = absl::Now();
  Log(LogLevel::kInfo, "shutdown_started",
      {{"grace_s", absl::StrCat(absl::ToDoubleSeconds(config_.shutdown_grace))}});
  // Refuse new work (UNAVAILABLE, which clients and balancers retry elsewhere) before
  // advertising NOT_SERVING, so a client that sees NOT_SERVING knows no later request
  // of its will be accepted. gRPC keeps its listener open meanwhile: closing it first
  // would answer late arrivals with CANCELLED instead. Accepted requests complete; those
  // still running when the grace period ends are cancelled by gRPC's shutdown.
  service_->StartDraining();
  server_->GetHealthCheckService()->SetServingStatus(false);
  const bool idle = service_->AwaitIdle(start + config_.shutdown_grace);
  if (!idle) Log(LogLevel::kWarning, "shutdown_grace_expired", {});
  // Answered calls may still be flushing their responses: give them a moment (Shutdown
  // returns as soon as they are done); past the grace period, cancel at once.
  server_->Shutdown(
      absl::ToChronoTime(absl::Now() + (idle ? absl::Seconds(5) : absl::ZeroDuration())));
  executor_->Drain();
  server_->Wait();
  Log(LogLevel::kInfo, "shutdown_complete",
      {{"took_ms", absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - start))}});
}

GemmServer::~GemmServer() {
  if (server_ != nullptr) Shutdown();
}

}  // namespace gemmd
