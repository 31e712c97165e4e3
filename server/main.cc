// gemm-server: serves GemmService (Matmul, QuantizedMatmul, GetServerInfo),
// grpc.health.v1 and server reflection over gRPC, and Prometheus metrics over HTTP on its
// own port.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/blas_thread_wait.h"
#include "server/gemm_server.h"
#include "server/library_logs.h"
#include "server/observability/log.h"
#include "server/stop_signals.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "Address to listen on (gRPC and metrics).");
ABSL_FLAG(int, port, 50051, "gRPC port; 0 picks a free one (printed in the start log line).");
ABSL_FLAG(std::string, unix_socket, "",
          "Also serve gRPC on this Unix domain socket path (clients: --target unix:PATH), for "
          "callers on the same machine; same TLS and tokens as the port. A socket left by a "
          "server that died is replaced; one a live server answers on is an error. Access "
          "is the socket file's permissions (the umask).");
ABSL_FLAG(int, metrics_port, 9464,
          "Prometheus /metrics port; 0 picks a free one, -1 turns the endpoint off.");
ABSL_FLAG(std::string, metrics_host, "",
          "Address the /metrics endpoint listens on; empty = --host. /metrics has no "
          "authentication: keep it on a private interface (e.g. 127.0.0.1, or a pod's own "
          "address) when the gRPC port is public.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate (chain) of the server: with --tls_key_file, the gRPC port speaks "
          "TLS only (plaintext clients fail at the handshake). Re-read every --tls_refresh_s: "
          "a replaced certificate is served to new connections without a restart.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file (unencrypted).");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificate(s): mutual TLS. Clients must present a certificate signed by "
          "one of them, or the handshake fails. Re-read like the certificate.");
ABSL_FLAG(double, tls_refresh_s, 60,
          "How often the TLS files are checked for changes (seconds, >= 1).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Tenants and their bearer tokens, one `tenant:token` per line (# comments; tokens "
          "of 16+ printable characters). Every GemmService call must then carry "
          "`authorization: Bearer TOKEN` or gets UNAUTHENTICATED; grpc.health.v1 and "
          "reflection stay open. Resident tensors belong to the tenant that stored them. "
          "Re-read on SIGHUP (a file with an error is refused and the tokens in use stay).");
ABSL_FLAG(int64_t, tenant_max_inflight_bytes, 0,
          "With --auth_tokens_file: host memory one tenant's Matmul/QuantizedMatmul calls may "
          "hold at once (requests received, results until sent); beyond it that tenant gets "
          "RESOURCE_EXHAUSTED naming this flag. 0 = only --max_inflight_bytes.");
ABSL_FLAG(int64_t, tenant_tensor_store_bytes, 0,
          "With --auth_tokens_file: bytes one tenant's resident tensors may take of the store; "
          "beyond it PutTensor / keep_c get RESOURCE_EXHAUSTED naming this flag. 0 = only "
          "--tensor_store_bytes.");
ABSL_FLAG(int64_t, tensor_store_max_tensors, 16384,
          "Most resident tensors at once (uploads in progress included); beyond it PutTensor "
          "and keep_c get RESOURCE_EXHAUSTED naming this flag. Each tensor also counts at "
          "its real cost against --tensor_store_bytes (whole pages, and ~2 KB of record).");
ABSL_FLAG(int64_t, max_open_uploads, 64,
          "Most uploads one tenant (everyone, without --auth_tokens_file) may have open at "
          "once: header sent, not yet complete (each holds its tensor's room in the store). "
          "0 = no limit.");
ABSL_FLAG(double, upload_idle_timeout_s, 10,
          "A PutTensor stream that sends nothing for this long is ended (DEADLINE_EXCEEDED) "
          "and its room in the store freed. 0 = never.");
ABSL_FLAG(double, part_upload_timeout_s, 10,
          "A tensor opened for parallel parts (header.parts) with no part uploading for this "
          "long (since it was opened or a part last began or finished) is dropped.");
ABSL_FLAG(std::string, quantized_layout, "auto",
          "The layout a resident INT8 / NVFP4 tensor is kept in once uploaded: auto (the "
          "device's choice: re-laid out where its kernels read another layout faster), "
          "canonical (as uploaded), or swap-ab (the swap-AB kernels' layout wherever the shape "
          "has it: rows % 16 == 0, K % 64 == 0; on the CPU backend requests and GetTensor read "
          "it back). GetTensor always returns the uploaded bytes.");
ABSL_FLAG(int64_t, prepare_inline_max_bytes, int64_t{1} << 20,
          "Matmul and QuantizedMatmul requests up to this many bytes are prepared (payloads "
          "placed, operands dequantized) on the gRPC thread that read them; larger ones on "
          "the server's preparer threads, so gRPC's threads go back to other calls. "
          "-1 = every request on gRPC's threads, 0 = every request on the preparers.");
ABSL_FLAG(int, call_queue_threads, 0,
          "Threads serving every call (all methods) on gRPC's completion-queue API, "
          "each polling its own queue (they never wait for a GEMM). 0 = half the cores, "
          "between 1 and 8; at most 64.");
ABSL_FLAG(int, stream_max_outstanding, 256,
          "Requests one MatmulStream may have sent that the server has read and not yet "
          "answered; past it the server reads no more of that stream until it has answered "
          "some (HTTP/2 flow control then holds the sender back). 1 to 65536.");
ABSL_FLAG(bool, download_copies, false,
          "GetTensor copies each chunk out of resident memory into host memory reserved for "
          "the download, as the CUDA backend must, even where the tensor is host memory (the "
          "CPU backend sends it in place): for measuring that path without a GPU.");
ABSL_FLAG(std::string, shm, "on",
          "on | off. Shared-memory regions for callers on this machine (RegisterRegion): "
          "requests then name operands and C in a region instead of carrying them. off "
          "refuses the region RPCs and slices (FAILED_PRECONDITION).");
ABSL_FLAG(std::string, shm_prefix, "gemmd-",
          "A region's key (its POSIX shared-memory name) must start with \"/\" and this; "
          "with --auth_tokens_file then the tenant's name and '@' (\"/gemmd-alice@x\"), so "
          "one tenant cannot map another's objects. Containers: share /dev/shm (or an "
          "emptyDir of medium Memory mounted there) between the server and its callers.");
ABSL_FLAG(int64_t, shm_max_bytes, int64_t{16} << 30,
          "Most bytes all registered regions may map together (on a GPU they are "
          "page-locked: memory the system cannot page out).");
ABSL_FLAG(uint32_t, shm_max_regions, 64, "Most regions one tenant may have registered.");
ABSL_FLAG(std::string, backend, "auto",
          "auto | cpu | cuda. auto = cuda when this build has CUDA and a GPU is present, "
          "else cpu (OpenBLAS).");
ABSL_FLAG(int, cpu_devices, 1,
          "CPU backend: serve as this many devices (cpu:0, cpu:1, ...), each running its own "
          "launches at the same time as the others (OpenBLAS's threads are shared). Lets "
          "placement, resident tensors on several devices (PutTensor's header.device) and "
          "per-device metrics be tried without GPUs.");
ABSL_FLAG(std::string, devices, "all",
          "CUDA backend: GPUs to serve on, 'all' or a comma list of ordinals (e.g. 0,2).");
ABSL_FLAG(std::string, cuda_sync, "spin",
          "How a thread waits for its GPU: spin (answers sooner; measured faster and no "
          "dearer per request for small requests) or blocking (sleeps until the GPU signals: "
          "no core spent waiting on long launches).");
ABSL_FLAG(int, cuda_lanes, 2,
          "CUDA backend: batches one GPU runs at once, each with its own stream, page-locked "
          "staging and share of device memory, so one batch's copies overlap another's "
          "compute. More lanes start a batch sooner when the GPU is not the limit; each "
          "spins a core while it waits (--cuda_sync=spin). 1 to 16.");
ABSL_FLAG(std::string, grpc_arg, "",
          "Extra gRPC server arguments with integer values, name=value[,name=value] (e.g. "
          "grpc.http2.max_frame_size=1048576): for measuring transport settings; they "
          "override the server's own.");
ABSL_FLAG(int64_t, device_memory_limit_bytes, 0,
          "CUDA backend: device memory each GPU's pool may hold (operands, results, "
          "workspace); 0 = 90% of the GPU's free memory at start.");
ABSL_FLAG(int64_t, tensor_store_bytes, -1,
          "Cap on resident tensors (PutTensor, and results kept with keep_c), all devices "
          "together: device memory on the CUDA backend, host memory on the CPU backend. "
          "-1 = 40% of the GPUs' memory (CUDA) or 25% of physical memory (CPU); 0 = no store. "
          "An explicit value on CUDA is also left out of the default device pool.");
ABSL_FLAG(uint32_t, max_batch_size, 64,
          "Most requests one launch serves. Requests batch when they share precision, "
          "dtypes, M, N, K, transposes, alpha, beta and kernel. 1 turns batching off.");
ABSL_FLAG(bool, wait_when_idle, false,
          "Hold a request for --max_queue_delay_us even when a device is idle and no other "
          "request is arriving (by default it launches at once then: waiting would only add "
          "latency).");
ABSL_FLAG(int64_t, max_queue_delay_us, 100,
          "How long the first request of a batch may wait for company before it launches "
          "anyway (microseconds; 0 = never wait). It does not wait when a device is idle and "
          "no other request is arriving (see --wait_when_idle).");
ABSL_FLAG(int64_t, max_inflight_bytes, int64_t{4} << 30,
          "Cap on the host memory requests hold: each one's request bytes from the moment it "
          "is read, its operands, and its result until gRPC has sent it (so clients that do "
          "not read their replies pin at most this), pooled result buffers included. Beyond "
          "it RESOURCE_EXHAUSTED at once. 0 = no cap.");
ABSL_FLAG(int64_t, message_pool_bytes, int64_t{1} << 30,
          "Operand and result buffers kept between Matmul and QuantizedMatmul calls for "
          "reuse, so big requests skip fresh allocations and page faults, and on CUDA the "
          "cost of page-locking (within --max_inflight_bytes). 0 = keep none.");
ABSL_FLAG(int64_t, grpc_buffer_bytes, 0,
          "Memory gRPC may hold for bytes on their way in (requests still arriving, all "
          "connections together; a gRPC resource quota). Past it gRPC resets streams and "
          "their clients get RESOURCE_EXHAUSTED, so an oversize or endless upload is cut off "
          "instead of read into memory. 0 = twice --max_message_bytes, at least 64 MiB.");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{512} << 20,
          "Largest request or response in bytes (default 512 MiB: two 4096x4096 FP32 "
          "operands take 128 MiB). gRPC's ceiling is 2147483647.");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 27,
          "Most elements any one operand or result may have; larger problems get "
          "RESOURCE_EXHAUSTED before anything is allocated.");
ABSL_FLAG(uint32_t, max_queue_size, 1024,
          "Most requests waiting for a device; beyond it RESOURCE_EXHAUSTED at once.");
ABSL_FLAG(std::string, cuda_module_loading, "",
          "eager: the GPU kernels load when a device opens, so no request pays for it (with "
          "CUDA's default, lazy, the first launch of each kernel loads its module: measured "
          "4.2 ms on the first quantized request on an H200); lazy: on first use, for a faster "
          "start. Sets CUDA_MODULE_LOADING; unset: the environment's CUDA_MODULE_LOADING if "
          "there is one, else eager. No effect on the CPU backend.");
ABSL_FLAG(double, max_connection_age_s, 0,
          "Close each client connection after about this many seconds (gRPC's max connection "
          "age: a GOAWAY, +-10% jitter; calls in flight finish, new ones open a new "
          "connection), so long-lived clients re-resolve their target and spread over "
          "replicas added since they connected. 0 = connections live as long as the client "
          "keeps them.");
ABSL_FLAG(double, shutdown_grace_s, 30.0,
          "On SIGTERM/SIGINT: seconds to let accepted requests finish before cancelling them.");

namespace {

// The flags of server/main.cc are gemm-server's own; --help names them so, wherever the
// binary was built.
bool ServerFlagFile(absl::string_view file) {
  return file == "gemm-server" || absl::EndsWith(file, "server/main.cc");
}

std::string VersionString() {
#ifdef GEMM_HAVE_CUDA
  constexpr const char* kCuda = "CUDA and CPU backends";
#else
  constexpr const char* kCuda = "CPU backend only (built without CUDA)";
#endif
  return absl::StrCat("gemm-server ", gemmd::kGemmdVersion, " (gemmd; ", kCuda, ")\n");
}

}  // namespace

int main(int argc, char** argv) {
  gemmd::LimitBlasThreadWait(argv);  // may run this program again (blas_thread_wait.h)
  // gRPC reads large messages into freshly allocated slices; with glibc's defaults each
  // large block is a new mmap (or trimmed heap) whose every page faults on first touch,
  // which costs more than the copy itself. Keep freed memory mapped for reuse instead
  // (the server's own operand and result buffers are pooled by HostMemory).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  absl::SetProgramUsageMessage(
      "matrix multiplication as a gRPC service.\n"
      "Usage: gemm-server [--port=50051] [--metrics_port=9464] [--backend=auto|cpu|cuda]\n"
      "                   [--max_batch_size=64] [--max_queue_delay_us=100] ...\n"
      "Stops gracefully on SIGTERM/SIGINT: health goes NOT_SERVING, calls arriving after "
      "the\nsignal are refused (UNAVAILABLE), calls taken before complete, uploads included "
      "(up to\n--shutdown_grace_s; a repeated signal changes nothing), exit status 0.");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = ServerFlagFile;
  usage.contains_helpshort_flags = ServerFlagFile;
  usage.version_string = VersionString;
  usage.normalize_filename = [](absl::string_view file) {
    return ServerFlagFile(file) ? std::string("gemm-server") : std::string(file);
  };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  gemmd::RouteLibraryLogs();
  // Debian's abseil is built without NDEBUG, which turns on absl::Mutex's deadlock
  // detector: every lock then updates one process-wide graph under one global lock. On
  // the 16-core GPU host that serialized the request path (docs/BENCHMARKS.md). The tests
  // keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Before anything touches CUDA: the driver reads it when it initializes.
  const std::string module_loading = absl::GetFlag(FLAGS_cuda_module_loading);
  if (!module_loading.empty() && module_loading != "eager" && module_loading != "lazy") {
    std::fprintf(stderr, "gemm-server: --cuda_module_loading must be eager or lazy, not '%s'\n",
                 module_loading.c_str());
    return 2;
  }
  if (!module_loading.empty()) {
    setenv("CUDA_MODULE_LOADING", module_loading == "eager" ? "EAGER" : "LAZY", /*overwrite=*/1);
  } else {
    setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);  // an operator's setting stays
  }

  if (absl::Status s = gemmd::InstallStopSignals(); !s.ok()) {
    std::fprintf(stderr, "gemm-server: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  // A client that disconnects mid-write must not kill the server.
  signal(SIGPIPE, SIG_IGN);

  gemmd::ServerConfig config;
  config.host = absl::GetFlag(FLAGS_host);
  config.port = absl::GetFlag(FLAGS_port);
  config.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  config.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  config.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  config.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  config.tls.refresh = absl::Seconds(absl::GetFlag(FLAGS_tls_refresh_s));
  config.backend = absl::GetFlag(FLAGS_backend);
  config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.max_elements = absl::GetFlag(FLAGS_max_elements);
  config.max_queue_size = absl::GetFlag(FLAGS_max_queue_size);
  config.shutdown_grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  config.max_connection_age = absl::Seconds(absl::GetFlag(FLAGS_max_connection_age_s));
  config.devices = absl::GetFlag(FLAGS_devices);
  config.cpu_devices = absl::GetFlag(FLAGS_cpu_devices);
  config.device_memory_limit_bytes = absl::GetFlag(FLAGS_device_memory_limit_bytes);
  config.tensor_store_bytes = absl::GetFlag(FLAGS_tensor_store_bytes);
  config.cuda_sync = absl::GetFlag(FLAGS_cuda_sync);
  config.cuda_lanes = absl::GetFlag(FLAGS_cuda_lanes);
  config.grpc_args = absl::GetFlag(FLAGS_grpc_arg);
  config.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  config.max_queue_delay = absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us));
  config.wait_when_idle = absl::GetFlag(FLAGS_wait_when_idle);
  config.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  config.message_pool_bytes = absl::GetFlag(FLAGS_message_pool_bytes);
  config.grpc_buffer_bytes = absl::GetFlag(FLAGS_grpc_buffer_bytes);
  config.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  config.tenant_max_inflight_bytes = absl::GetFlag(FLAGS_tenant_max_inflight_bytes);
  config.tenant_tensor_store_bytes = absl::GetFlag(FLAGS_tenant_tensor_store_bytes);
  config.tensor_store_max_tensors = absl::GetFlag(FLAGS_tensor_store_max_tensors);
  config.max_open_uploads = absl::GetFlag(FLAGS_max_open_uploads);
  config.upload_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_upload_idle_timeout_s));
  config.part_upload_timeout = absl::Seconds(absl::GetFlag(FLAGS_part_upload_timeout_s));
  config.quantized_layout = absl::GetFlag(FLAGS_quantized_layout);
  config.download_copies = absl::GetFlag(FLAGS_download_copies);
  config.prepare_inline_max_bytes = absl::GetFlag(FLAGS_prepare_inline_max_bytes);
  config.stream_max_outstanding = absl::GetFlag(FLAGS_stream_max_outstanding);
  config.call_queue_threads = absl::GetFlag(FLAGS_call_queue_threads);
  const std::string shm = absl::GetFlag(FLAGS_shm);
  if (shm != "on" && shm != "off") {
    std::fprintf(stderr, "gemm-server: --shm must be on or off, not '%s'\n", shm.c_str());
    return 2;
  }
  config.shm = shm == "on";
  config.shm_prefix = absl::GetFlag(FLAGS_shm_prefix);
  config.shm_max_bytes = absl::GetFlag(FLAGS_shm_max_bytes);
  config.shm_max_regions = absl::GetFlag(FLAGS_shm_max_regions);

  absl::StatusOr<std::unique_ptr<gemmd::GemmServer>> server = gemmd::GemmServer::Create(config);
  if (!server.ok()) {
    gemmd::Log(gemmd::LogLevel::kError, "start_failed",
               {{"code", absl::StatusCodeToString(server.status().code())},
                {"message", std::string(server.status().message())}});
    return 1;
  }

  int first = gemmd::NextStopEvent();
  // ReloadTokens logs its outcome; a failed reload keeps the tokens in use.
  for (; first == SIGHUP; first = gemmd::NextStopEvent()) {
    (*server)->ReloadTokens().IgnoreError();
  }
  gemmd::Log(gemmd::LogLevel::kInfo, "signal_received", {{"signal", gemmd::SignalName(first)}});
  // The drain runs on its own thread; this one keeps reading, so a repeated signal is
  // noted and changes nothing: the drain always runs to its end.
  gemmd::GemmServer* running = server->get();
  std::thread drain([running] {
    running->Shutdown();
    gemmd::NotifyStopDone();
  });
  for (int event = gemmd::NextStopEvent(); event != 0; event = gemmd::NextStopEvent()) {
    if (event == SIGHUP) {
      running->ReloadTokens().IgnoreError();
      continue;
    }
    gemmd::Log(gemmd::LogLevel::kInfo, "signal_received",
               {{"signal", gemmd::SignalName(event)}, {"action", "ignored: the drain continues"}});
  }
  drain.join();
  // Everything is answered and gRPC has stopped. Tearing the rest down would only wait:
  // the metrics web server takes a second or more to stop its threads. Leave at once.
  std::_Exit(0);
}
