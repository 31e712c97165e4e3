#include "client_cli/cli_flags.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address: host:port, or any gRPC target URI: ipv4:10.0.0.1:50051,10.0.0.2:50051 "
          "(several replicas), dns:///gemmd-headless:50051 (every address the name has). "
          "Calls are balanced over the addresses (round_robin) and retried on UNAVAILABLE.");
ABSL_FLAG(double, timeout_s, 60, "Deadline of each RPC in seconds.");
ABSL_FLAG(bool, tls, false,
          "Call over TLS, checking the server's certificate against the system's CA roots "
          "(implied by any --tls_* file or name).");
ABSL_FLAG(std::string, tls_ca_file, "",
          "TLS: PEM CA certificate(s) to check the server's certificate against.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "Mutual TLS: PEM client certificate (with --tls_key_file), for servers started with "
          "--tls_client_ca_file.");
ABSL_FLAG(std::string, tls_key_file, "", "Mutual TLS: PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_server_name, "",
          "TLS: the name the server's certificate must carry, when it differs from the "
          "target's host (e.g. connecting by IP address).");
ABSL_FLAG(std::string, token_file, "",
          "File whose first line is the bearer token sent with every call (servers with "
          "--auth_tokens_file). Without it, the GEMMD_TOKEN environment variable is used if "
          "set. (No --token flag: a command line is visible to every user of the machine.)");
ABSL_FLAG(int64_t, m, 512, "Rows of op(A) and C (random operands).");
ABSL_FLAG(int64_t, n, 512, "Columns of op(B) and C (random operands).");
ABSL_FLAG(int64_t, k, 512, "Inner dimension (random operands).");
ABSL_FLAG(int64_t, batch, 0, "Batch items ([batch, rows, cols] operands); 0 = plain matrices.");
ABSL_FLAG(std::string, dtype, "float32",
          "Random operands' dtype: float32, float16, bfloat16, float64 (computed in FP64).");
ABSL_FLAG(std::string, a, "",
          "A from a .npy file (float32/float16/float64, C order), or @HANDLE: a resident tensor "
          "(gemm-cli put), sent by reference. A file needs --b; with a handle the other "
          "operand may be random (its shape from the handle's and --m/--n).");
ABSL_FLAG(std::string, b, "", "B from a .npy file (needs --a), or @HANDLE (see --a).");
ABSL_FLAG(std::string, c, "",
          "matmul: the C input of beta * C (--beta != 0) from a .npy file or @HANDLE, "
          "instead of random values.");
ABSL_FLAG(std::string, out, "", "matmul: write C to this .npy file.");
ABSL_FLAG(std::string, precision, "auto",
          "auto | fp32 | fp16_tensor | fp64. auto: FP32 for float32 inputs, FP64 for float64 "
          "ones, else the tensor path. fp64 takes float64 inputs only.");
ABSL_FLAG(std::string, output_dtype, "",
          "C's dtype: float32, float16, bfloat16; float64 for FP64 (its only one). Unset: "
          "float32, or float64 for FP64.");
ABSL_FLAG(bool, transpose_a, false, "A is stored [K, M].");
ABSL_FLAG(bool, transpose_b, false, "B is stored [N, K].");
ABSL_FLAG(double, alpha, 1.0, "C = alpha * op(A) op(B) + beta * C.");
ABSL_FLAG(double, beta, 0.0, "Non-zero sends a random C input.");
ABSL_FLAG(std::string, kernel, "", "Force a kernel by name (see `gemm-cli info`).");
ABSL_FLAG(uint64_t, seed, 1, "Seed for random operands.");
ABSL_FLAG(bool, verify, false,
          "matmul: recompute C in FP64 here and print rel_error (exit 3 above tolerance). "
          "Operands given as @HANDLE are downloaded first (GetTensor) to compute it.");
ABSL_FLAG(int, concurrency, 0,
          "bench: requests in flight: a closed loop keeps this many going; an open loop "
          "(--rate) lets at most this many be in flight and drops (and counts) arrivals "
          "past it. 0 = 1 for a closed loop, 256 for an open one.");
ABSL_FLAG(int, channels, 1, "bench: TCP connections the workers share round-robin.");
ABSL_FLAG(double, duration_s, 10, "bench: measured seconds.");
ABSL_FLAG(double, warmup_s, 2, "bench: seconds run before measuring.");
ABSL_FLAG(bool, async, false,
          "bench: keep --concurrency calls in flight with gRPC's callback API instead of one "
          "blocking thread per call (a lighter client, for high request rates).");
ABSL_FLAG(bool, stream, false,
          "bench: send the requests on MatmulStreams instead of one call each: --concurrency "
          "streams (over the --channels connections, round-robin), each keeping --outstanding "
          "requests in flight. The way to many small GEMMs a second.");
ABSL_FLAG(int, outstanding, 64,
          "bench --stream: requests each stream keeps in flight (sent and not yet answered).");
ABSL_FLAG(bool, local, false,
          "bench: time the CPU backend in this process (no gRPC): the service's ceiling.");
ABSL_FLAG(bool, json, false, "info/bench: print JSON.");
ABSL_FLAG(double, rate, 0,
          "bench: open loop: start requests at this rate (per second) whatever the server "
          "does, latency counted from each request's intended send time (no coordinated "
          "omission); --concurrency caps calls in flight (256 unless set), arrivals past it "
          "are dropped, counted and warned about. 0 = closed loop.");
ABSL_FLAG(std::string, arrivals, "poisson",
          "bench --rate: poisson (exponential gaps) or fixed (evenly spaced) arrivals.");
ABSL_FLAG(std::string, grpc_arg, "",
          "bench: extra gRPC channel arguments with integer values, name=value[,...] (e.g. "
          "grpc.http2.max_frame_size=1048576), to measure transport settings.");
ABSL_FLAG(int, server_pid, 0,
          "bench: the server's process id on this host: report its CPU time per request "
          "(from /proc/PID/stat) over the measured window.");
ABSL_FLAG(std::string, format, "nvfp4",
          "quantized: int8 or nvfp4 (NVFP4 needs K % 16 == 0). put: quantize the tensor "
          "(2-D [rows, K]) to this format here and upload it quantized; unset = dense.");
ABSL_FLAG(int64_t, ttl_s, 0,
          "put, matmul --keep_c: the server drops the tensor this many seconds after it is "
          "stored; 0 = kept until deleted (gemm-cli rm).");
ABSL_FLAG(std::string, label, "", "put, matmul --keep_c: a name shown by gemm-cli ls.");
ABSL_FLAG(std::string, device, "",
          "put: the server device to keep the tensor on, as `gemm-cli info` names it (e.g. "
          "cuda:1); empty = the server's choice. Tensors one matmul reads by handle must "
          "be on one device.");
ABSL_FLAG(int, connections, -1,
          "put / get: move the tensor in up to this many parts at once (1 to 64), each on its "
          "own connection (one HTTP/2 connection carries a fraction of what TCP can); a part "
          "is at least 1 MiB and one row. Unset: put 1 under 64 MiB, else 8; get 1.");
ABSL_FLAG(int, stripes, 0,
          "matmul, quantized, bench: connections each call's bytes go over (0 to 64). 0 = the "
          "client's choice: a call moving 32 MiB or more (operands and C) goes over 8, its "
          "operands and C of 4 MiB or more as temporary resident tensors sent and read in "
          "row parts, and a smaller call over one; 1 = one connection; N = N, every operand "
          "and C striped.");
ABSL_FLAG(int, row_blocks, 0,
          "matmul, bench: row blocks a striped call goes in when it can (A and B inline, "
          "rank 2, A not transposed, beta 0, 1024 rows or more): each block's product is "
          "computed and its rows of C read back while A's next block uploads, with the whole "
          "call's bits. Over loopback it measured slower than whole (both ends' gRPC "
          "threads bound the rate, not the wire); it is for links where each direction has "
          "its own capacity. 0 = the client's choice (whole); 1 = whole; N = up to N, each "
          "of at least 512 rows.");
ABSL_FLAG(int, chunk_kib, 0,
          "put, matmul, quantized, bench: KiB of tensor data in each message of an upload "
          "(a put, or a striped call's operands), 64 to the server's max_tensor_chunk_bytes "
          "(`gemm-cli info`); 0 = 4096 KiB for a put (or the server's largest when smaller), "
          "2048 KiB for a striped call's operands. Smaller chunks let the server copy one "
          "while the next arrives.");
ABSL_FLAG(bool, shm, false,
          "matmul, quantized, bench: put the operands and C in a shared-memory region "
          "registered with the server (it must run on this machine and share /dev/shm), so "
          "calls carry slices of it instead of tensor bytes; bench gives each call in flight "
          "its own C.");
ABSL_FLAG(std::string, shm_key, "",
          "--shm: the region's POSIX shared-memory name; empty = \"/\" + the server's "
          "--shm_prefix + \"cli-PID\". A server with tenants takes names with the tenant's: "
          "\"/gemmd-TENANT@...\".");
ABSL_FLAG(bool, keep_c, false,
          "matmul: keep C on the server as a resident tensor (--ttl_s, --label) and print "
          "its handle (c_ref=HANDLE); C is not sent back (--out / --verify download it).");
ABSL_FLAG(bool, resident_b, false,
          "bench: upload B once (PutTensor; quantized with --quantized), send A alone with "
          "B by handle, delete B at the end.");
ABSL_FLAG(bool, quantized, false,
          "bench: drive QuantizedMatmul (operands quantized once, --format, --weight_only) "
          "instead of Matmul.");
ABSL_FLAG(bool, weight_only, false,
          "quantized: quantize B (the weight) only; A goes unquantized as --dtype.");

namespace gemmd {

CliOptions CliOptionsFromFlags() {
  CliOptions o;
  o.rate = absl::GetFlag(FLAGS_rate);
  o.arrivals = absl::GetFlag(FLAGS_arrivals);
  o.server_pid = absl::GetFlag(FLAGS_server_pid);
  o.grpc_args = absl::GetFlag(FLAGS_grpc_arg);
  o.target = absl::GetFlag(FLAGS_target);
  o.security_files.tls = absl::GetFlag(FLAGS_tls);
  o.security_files.ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  o.security_files.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  o.security_files.key_file = absl::GetFlag(FLAGS_tls_key_file);
  o.security_files.server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.security_files.token_file = absl::GetFlag(FLAGS_token_file);
  if (const char* token = std::getenv("GEMMD_TOKEN"); token != nullptr) {
    o.security_files.token = token;
  }
  o.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  o.m = absl::GetFlag(FLAGS_m);
  o.n = absl::GetFlag(FLAGS_n);
  o.k = absl::GetFlag(FLAGS_k);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.a_path = absl::GetFlag(FLAGS_a);
  o.b_path = absl::GetFlag(FLAGS_b);
  o.out_path = absl::GetFlag(FLAGS_out);
  o.precision = absl::GetFlag(FLAGS_precision);
  o.output_dtype = absl::GetFlag(FLAGS_output_dtype);
  o.transpose_a = absl::GetFlag(FLAGS_transpose_a);
  o.transpose_b = absl::GetFlag(FLAGS_transpose_b);
  o.alpha = absl::GetFlag(FLAGS_alpha);
  o.beta = absl::GetFlag(FLAGS_beta);
  o.kernel = absl::GetFlag(FLAGS_kernel);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.verify = absl::GetFlag(FLAGS_verify);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (o.concurrency == 0) o.concurrency = o.rate > 0 ? 256 : 1;
  o.channels = absl::GetFlag(FLAGS_channels);
  o.duration_s = absl::GetFlag(FLAGS_duration_s);
  o.warmup_s = absl::GetFlag(FLAGS_warmup_s);
  o.local = absl::GetFlag(FLAGS_local);
  o.async = absl::GetFlag(FLAGS_async);
  o.stream = absl::GetFlag(FLAGS_stream);
  o.outstanding = absl::GetFlag(FLAGS_outstanding);
  o.json = absl::GetFlag(FLAGS_json);
  o.quant_format = absl::GetFlag(FLAGS_format);
  o.weight_only = absl::GetFlag(FLAGS_weight_only);
  o.quantized = absl::GetFlag(FLAGS_quantized);
  o.c_path = absl::GetFlag(FLAGS_c);
  o.ttl_s = absl::GetFlag(FLAGS_ttl_s);
  o.label = absl::GetFlag(FLAGS_label);
  o.connections = absl::GetFlag(FLAGS_connections);
  o.stripes = absl::GetFlag(FLAGS_stripes);
  o.row_blocks = absl::GetFlag(FLAGS_row_blocks);
  o.chunk_kib = absl::GetFlag(FLAGS_chunk_kib);
  o.shm = absl::GetFlag(FLAGS_shm);
  o.shm_key = absl::GetFlag(FLAGS_shm_key);
  o.device = absl::GetFlag(FLAGS_device);
  o.keep_c = absl::GetFlag(FLAGS_keep_c);
  o.resident_b = absl::GetFlag(FLAGS_resident_b);

  return o;
}

}  // namespace gemmd
