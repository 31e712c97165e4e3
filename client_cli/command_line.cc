#include "client_cli/command_line.h"

#include <algorithm>
#include <initializer_list>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client_cli/commands.h"

namespace gemmd {
namespace {

using FlagList = std::vector<absl::string_view>;

// Flags that shape the operands of a Matmul (matmul, and bench)...
const FlagList kMatmulOperandFlags = {"m",           "n",           "k",     "batch",
                                      "dtype",       "a",           "b",     "precision",
                                      "output_dtype", "transpose_a", "transpose_b", "alpha",
                                      "beta",        "kernel",      "seed"};
// ... and of a QuantizedMatmul (quantized, and bench --quantized).
const FlagList kQuantizedOperandFlags = {"m", "n",      "k",           "dtype",  "a",
                                         "b", "format", "weight_only", "kernel", "seed"};
// Where a resident tensor is made: its lifetime and name.
const FlagList kResidentFlags = {"ttl_s", "label"};

FlagList Concat(std::initializer_list<FlagList> lists) {
  FlagList all;
  for (const FlagList& list : lists) {
    for (absl::string_view flag : list) {
      if (std::find(all.begin(), all.end(), flag) == all.end()) all.push_back(flag);
    }
  }
  return all;
}

bool Applies(const CommandSpec& command, absl::string_view flag) {
  return std::find(std::begin(kCommonFlags), std::end(kCommonFlags), flag) !=
             std::end(kCommonFlags) ||
         std::find(command.flags.begin(), command.flags.end(), flag) != command.flags.end();
}

std::vector<absl::string_view> AllFlags(const CommandSpec& command) {
  std::vector<absl::string_view> all(std::begin(kCommonFlags), std::end(kCommonFlags));
  all.insert(all.end(), command.flags.begin(), command.flags.end());
  return all;
}

}  // namespace

const std::vector<CommandSpec>& Commands() {
  static const std::vector<CommandSpec>* commands = new std::vector<CommandSpec>{
      {"info", "print the server's version, backend, devices, kernels and limits", {"json"},
       &RunInfo},
      {"health", "grpc.health.v1 check; prints SERVING (exit 0) or NOT_SERVING (exit 2)", {},
       &RunHealth},
      {"matmul",
       "multiply random (--m --n --k [--batch] [--dtype]) or .npy (--a --b) operands,\n"
       "or resident tensors by handle (--a/--b/--c @HANDLE); --out c.npy saves C,\n"
       "--verify checks it against FP64 (downloading @HANDLE operands first);\n"
       "--keep_c keeps C on the server and prints c_ref=HANDLE; --stripes N: the\n"
       "connections the call's bytes go over (0: the client's choice); --shm: operands\n"
       "and C through a shared-memory region (a server on this machine)",
       Concat({kMatmulOperandFlags,
               {"c", "out", "verify", "keep_c", "stripes", "row_blocks", "chunk_kib", "shm",
                "shm_key"},
               kResidentFlags}),
       &RunMatmul},
      {"quantized",
       "C = A * B^T with A [M,K], B [N,K] quantized here (--format int8|nvfp4,\n"
       "--weight_only), sent to QuantizedMatmul; prints bytes saved; --verify prints the\n"
       "kernel error and the format error; --a/--b @HANDLE: resident operands (B\n"
       "quantized), downloaded for --verify; --stripes N and --shm as matmul's",
       Concat({kQuantizedOperandFlags,
               {"out", "verify", "stripes", "chunk_kib", "shm", "shm_key"}}),
       &RunQuantized},
      {"bench",
       "load test of one shape: closed loop (--concurrency calls in flight) or open\n"
       "loop (--rate R [--arrivals poisson|fixed]); --duration_s --warmup_s [--channels]\n"
       "[--async] [--json] [--server_pid PID: the server's CPU per request]; --local\n"
       "times the in-process CPU backend; --quantized drives QuantizedMatmul instead;\n"
       "--resident_b uploads B once and sends A alone (B by handle); --stripes N and\n"
       "--shm as matmul's, for every call; --stream [--outstanding N] sends the requests\n"
       "on MatmulStreams (--concurrency of them), N in flight on each; --verify checks a\n"
       "sample of the answers (the first, then every 256th, up to 16) against FP64",
       Concat({kMatmulOperandFlags, kQuantizedOperandFlags,
               {"quantized", "concurrency", "channels", "duration_s", "warmup_s", "async",
                "local", "json", "rate", "arrivals", "server_pid", "grpc_arg", "resident_b",
                "stripes", "row_blocks", "chunk_kib", "shm", "shm_key", "stream", "outstanding",
                "verify"}}),
       &RunBench},
      {"put",
       "upload FILE.npy as a resident tensor and print its handle (alone on stdout;\n"
       "bytes, seconds and GB/s on stderr): dense as its dtype (float32/float16, 2-D or\n"
       "3-D), or with --format int8|nvfp4 quantized here (2-D [rows, K]) as\n"
       "`gemm-cli quantized` quantizes B; large tensors go in parallel parts\n"
       "(--connections)",
       Concat({{"format", "connections", "chunk_kib", "device"}, kResidentFlags}), &RunPut,
       "FILE.npy"},
      {"get",
       "download a resident tensor to --out F.npy: dense FLOAT32/FLOAT16 as they are,\n"
       "BFLOAT16 and INT8 widened to float32 (exactly; .npy has no bfloat16), INT32\n"
       "refused; a quantized tensor (INT8/NVFP4) dequantized to float32; in row ranges\n"
       "over several connections at once with --connections N",
       {"out", "connections"}, &RunGet, "HANDLE"},
      {"rm", "delete a resident tensor", {}, &RunRm, "HANDLE"},
      {"ls",
       "list the resident tensors (handle, shape, dtype or format, bytes, device,\n"
       "created, expires, label) and the store's use of its cap; --json: the response",
       {"json"}, &RunLs},
  };
  return *commands;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

CommandLine ReadCommandLine(const std::vector<std::string>& args) {
  CommandLine line;
  for (size_t i = 1; i < args.size(); ++i) {
    absl::string_view token = args[i];
    if (token == "--") break;
    if (token.size() < 2 || token[0] != '-') {
      if (line.command.empty()) line.command = std::string(token);
      continue;
    }
    absl::ConsumePrefix(&token, "-");
    absl::ConsumePrefix(&token, "-");
    const size_t equals = token.find('=');
    absl::string_view name = token.substr(0, equals);
    if (absl::StartsWith(name, "help")) {
      line.help = true;
      continue;
    }
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      const absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        name = name.substr(2);
      }
    }
    line.flags.emplace_back(name);
    // A non-bool flag without '=' takes the next token as its value.
    if (equals == absl::string_view::npos && flag != nullptr && !flag->IsOfType<bool>()) ++i;
  }
  return line;
}

absl::Status CheckFlagsApply(const CommandLine& line, const CommandSpec& command) {
  for (const std::string& flag : line.flags) {
    if (Applies(command, flag)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " does not apply to 'gemm-cli ", command.name, "'; its flags: --",
        absl::StrJoin(AllFlags(command), ", --"), " (gemm-cli ", command.name, " --help)"));
  }
  return absl::OkStatus();
}

absl::Status CheckOperands(const std::vector<std::string>& operands, const CommandSpec& command) {
  const size_t wanted = command.operand.empty() ? 0 : 1;
  if (operands.size() == wanted) return absl::OkStatus();
  if (wanted == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'gemm-cli ", command.name,
                                                   "' takes no operands, not '", operands[0],
                                                   "' (gemm-cli ", command.name, " --help)"));
  }
  return absl::InvalidArgumentError(absl::StrCat("usage: gemm-cli ", command.name, " ",
                                                 command.operand, " [flags] (gemm-cli ",
                                                 command.name, " --help)"));
}

std::string HelpText(const CommandSpec* command) {
  if (command == nullptr) {
    std::string text =
        "gemm-cli: the client of gemm-server: inspect it, call it, verify it, load-test it.\n\n"
        "Usage: gemm-cli <command> [flags]      gemm-cli <command> --help: its flags\n\n"
        "Commands:\n";
    for (const CommandSpec& c : Commands()) {
      absl::StrAppend(&text, "  ", c.name, std::string(10 - c.name.size(), ' '),
                      absl::StrReplaceAll(c.summary, {{"\n", "\n            "}}), "\n");
    }
    absl::StrAppend(
        &text,
        "\nExit status: 0 ok, 1 error (RPC status code and message on stderr), 2 not serving,\n"
        "3 --verify above tolerance.\n\n"
        "Examples:\n"
        "  gemm-cli matmul --m 512 --n 512 --k 512 --verify\n"
        "  gemm-cli matmul --precision fp16_tensor --m 1024 --n 1024 --k 1024 --verify\n"
        "  gemm-cli quantized --format nvfp4 --weight_only --m 16 --n 4096 --k 4096 --verify\n"
        "  gemm-cli bench --m 1024 --n 1024 --k 1024 --concurrency 8 --duration_s 10\n"
        "  H=$(gemm-cli put w.npy --format nvfp4 --label w) && "
        "gemm-cli quantized --b @$H --m 16 --verify\n");
    return text;
  }
  std::string text = absl::StrCat(
      "gemm-cli ", command->name, ": ", command->summary, "\n\nUsage: gemm-cli ", command->name,
      command->operand.empty() ? "" : " ", command->operand, " [flags]\n\nFlags:\n");
  for (absl::string_view name : AllFlags(*command)) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    const std::string def = flag->DefaultValue();
    absl::StrAppend(&text, "  --", name, " (default: ", def.empty() ? "\"\"" : def, ")\n      ",
                    flag->Help(), "\n");
  }
  return text;
}

}  // namespace gemmd
