// gemm-cli: the client of gemm-server — inspect it, call it, verify it, load-test it.
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "client_cli/cli_options.h"
#include "client_cli/commands.h"
#include "client_cli/preflight.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address host:port (an IP by default: no name lookup needed).");
ABSL_FLAG(double, timeout_s, 60, "Deadline of each RPC in seconds.");
ABSL_FLAG(int64_t, m, 512, "Rows of op(A) and C (random operands).");
ABSL_FLAG(int64_t, n, 512, "Columns of op(B) and C (random operands).");
ABSL_FLAG(int64_t, k, 512, "Inner dimension (random operands).");
ABSL_FLAG(int64_t, batch, 0, "Batch items ([batch, rows, cols] operands); 0 = plain matrices.");
ABSL_FLAG(std::string, dtype, "float32", "Random operands' dtype: float32, float16, bfloat16.");
ABSL_FLAG(std::string, a, "", "A from a .npy file (float32/float16, C order); needs --b.");
ABSL_FLAG(std::string, b, "", "B from a .npy file; needs --a.");
ABSL_FLAG(std::string, out, "", "matmul: write C to this .npy file.");
ABSL_FLAG(std::string, precision, "auto",
          "auto | fp32 | fp16_tensor. auto: FP32 for float32 inputs, else the tensor path.");
ABSL_FLAG(std::string, output_dtype, "float32", "C's dtype: float32, float16, bfloat16.");
ABSL_FLAG(bool, transpose_a, false, "A is stored [K, M].");
ABSL_FLAG(bool, transpose_b, false, "B is stored [N, K].");
ABSL_FLAG(double, alpha, 1.0, "C = alpha * op(A) op(B) + beta * C.");
ABSL_FLAG(double, beta, 0.0, "Non-zero sends a random C input.");
ABSL_FLAG(std::string, kernel, "", "Force a kernel by name (see `gemm-cli info`).");
ABSL_FLAG(uint64_t, seed, 1, "Seed for random operands.");
ABSL_FLAG(bool, verify, false,
          "matmul: recompute C in FP64 here and print rel_error (exit 3 above tolerance).");
ABSL_FLAG(int, concurrency, 1, "bench: requests in flight (closed loop).");
ABSL_FLAG(int, channels, 1, "bench: TCP connections the workers share round-robin.");
ABSL_FLAG(double, duration_s, 10, "bench: measured seconds.");
ABSL_FLAG(double, warmup_s, 2, "bench: seconds run before measuring.");
ABSL_FLAG(bool, async, false,
          "bench: keep --concurrency calls in flight with gRPC's callback API instead of one "
          "blocking thread per call (a lighter client, for high request rates).");
ABSL_FLAG(bool, local, false,
          "bench: time the CPU backend in this process (no gRPC): the service's ceiling.");
ABSL_FLAG(bool, json, false, "info/bench: print JSON.");
ABSL_FLAG(std::string, format, "nvfp4", "quantized: int8 or nvfp4 (NVFP4 needs K % 16 == 0).");
ABSL_FLAG(bool, quantized, false,
          "bench: drive QuantizedMatmul (operands quantized once, --format, --weight_only) "
          "instead of Matmul.");
ABSL_FLAG(bool, weight_only, false,
          "quantized: quantize B (the weight) only; A goes unquantized as --dtype.");

namespace {

constexpr char kUsage[] =
    "client of gemm-server.\n\n"
    "Usage: gemm-cli <command> [--target=host:port] [flags]\n\n"
    "Commands:\n"
    "  info     print the server's version, backend, devices, kernels and limits\n"
    "  health   grpc.health.v1 check; prints SERVING (exit 0) or NOT_SERVING (exit 2)\n"
    "  matmul   multiply random (--m --n --k [--batch] [--dtype]) or .npy (--a --b)\n"
    "           operands; --out c.npy saves C, --verify checks it against FP64\n"
    "  quantized  C = A * B^T with A [M,K], B [N,K] quantized here (--format int8|nvfp4,\n"
    "           --weight_only), sent to QuantizedMatmul; prints bytes saved; --verify\n"
    "           prints the kernel error and the format error\n"
    "  bench    closed-loop load test of one shape: --concurrency --duration_s\n"
    "           --warmup_s [--channels] [--async] [--json]; --local times the in-process CPU\n"
    "           backend; --quantized drives QuantizedMatmul instead\n\n"
    "Exit status: 0 ok, 1 error (RPC status code and message on stderr), 2 not serving,\n"
    "3 --verify above tolerance.\n\n"
    "Examples:\n"
    "  gemm-cli matmul --m 512 --n 512 --k 512 --verify\n"
    "  gemm-cli matmul --precision fp16_tensor --m 1024 --n 1024 --k 1024 --verify\n"
    "  gemm-cli quantized --format nvfp4 --weight_only --m 16 --n 4096 --k 4096 --verify\n"
    "  gemm-cli bench --m 1024 --n 1024 --k 1024 --concurrency 8 --duration_s 10";

bool CliFlagFile(absl::string_view file) { return absl::StrContains(file, "client_cli/"); }

std::string VersionString() { return "gemm-cli 0.1.0 (gemmd client)\n"; }

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = CliFlagFile;
  usage.contains_helpshort_flags = CliFlagFile;
  usage.version_string = VersionString;
  absl::SetFlagsUsageConfig(usage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n\nRun gemm-cli --help for all flags.\n", kUsage);
    return 1;
  }
  const std::string command = args[1];

  gemmd::CliOptions o;
  o.target = absl::GetFlag(FLAGS_target);
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
  o.channels = absl::GetFlag(FLAGS_channels);
  o.duration_s = absl::GetFlag(FLAGS_duration_s);
  o.warmup_s = absl::GetFlag(FLAGS_warmup_s);
  o.local = absl::GetFlag(FLAGS_local);
  o.async = absl::GetFlag(FLAGS_async);
  o.json = absl::GetFlag(FLAGS_json);
  o.quant_format = absl::GetFlag(FLAGS_format);
  o.weight_only = absl::GetFlag(FLAGS_weight_only);
  o.quantized = absl::GetFlag(FLAGS_quantized);

  if (absl::Status s = gemmd::CheckCommonFlags(o); !s.ok()) return gemmd::ReportError(s);
  try {
    if (command == "info") return gemmd::RunInfo(o);
    if (command == "health") return gemmd::RunHealth(o);
    if (command == "matmul") return gemmd::RunMatmul(o);
    if (command == "bench") return gemmd::RunBench(o);
    if (command == "quantized") return gemmd::RunQuantized(o);
  } catch (const std::bad_alloc&) {
    // The sizes are checked against this machine's memory first; this is what is left
    // (another process took the memory meanwhile, or an estimate fell short).
    std::fprintf(stderr, "error: out of memory while building or receiving the request\n");
    return 1;
  }
  std::fprintf(stderr,
               "error: unknown command '%s'; expected info, health, matmul, quantized or bench\n",
               command.c_str());
  return 1;
}
