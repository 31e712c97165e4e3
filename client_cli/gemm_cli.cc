// gemm-cli: the client of gemm-server — inspect it, call it, verify it, load-test it.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/synchronization/mutex.h"
#include "client_cli/cli_flags.h"
#include "client_cli/command_line.h"
#include "client_cli/commands.h"
#include "client_cli/preflight.h"

namespace {

std::string VersionString() { return "gemm-cli 0.1.0 (gemmd client)\n"; }

}  // namespace

int main(int argc, char** argv) {
  // As in gemm-server: large responses arrive in fresh allocations whose page faults cost
  // more than the copy; keep freed memory mapped for reuse.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // As in gemm-server: Debian's abseil is built without NDEBUG, so absl::Mutex's deadlock
  // detector (one process-wide graph under one global lock) would run on every lock gRPC
  // takes, and a load test on the server's host would take CPU the server needs.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::string usage = gemmd::HelpText(nullptr);
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = VersionString;
  absl::SetFlagsUsageConfig(usage_config);
  // Help is ours, per command (absl's lists every flag of the binary by source file).
  const gemmd::CommandLine line =
      gemmd::ReadCommandLine(std::vector<std::string>(argv, argv + argc));
  if (line.help) {
    std::fputs(gemmd::HelpText(gemmd::FindCommand(line.command)).c_str(), stdout);
    return 0;
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "%s\n", usage.c_str());
    return 1;
  }
  const std::string command = args[1];
  const gemmd::CommandSpec* spec = gemmd::FindCommand(command);
  if (spec == nullptr) {
    std::fprintf(stderr,
                 "error: unknown command '%s'; expected info, health, matmul, quantized, "
                 "bench, put, get, rm or ls\n",
                 command.c_str());
    return 1;
  }
  if (absl::Status s = gemmd::CheckFlagsApply(line, *spec); !s.ok()) {
    return gemmd::ReportError(s);
  }

  gemmd::CliOptions o = gemmd::CliOptionsFromFlags();
  o.args.assign(args.begin() + 2, args.end());
  if (absl::Status s = gemmd::CheckOperands(o.args, *spec); !s.ok()) {
    return gemmd::ReportError(s);
  }
  // --format's default serves `quantized`; for `put` only naming it asks to quantize.
  o.format_set =
      std::find(line.flags.begin(), line.flags.end(), "format") != line.flags.end();
  if (absl::Status s = gemmd::CheckCommonFlags(o); !s.ok()) return gemmd::ReportError(s);
  absl::StatusOr<gemmd::ChannelSecurity> security = gemmd::LoadChannelSecurity(o.security_files);
  if (!security.ok()) return gemmd::ReportError(security.status());
  o.security = *std::move(security);
  gemmd::SetConnectionSecurity(o.security);
  if (!o.security.token.empty() && !o.security.tls) {
    std::fprintf(stderr,
                 "warning: sending the bearer token to %s without TLS: anyone on the path "
                 "can read it (--tls_ca_file)\n",
                 o.target.c_str());
  }
  try {
    return spec->run(o);
  } catch (const std::bad_alloc&) {
    // The sizes are checked against this machine's memory first; this is what is left
    // (another process took the memory meanwhile, or an estimate fell short).
    std::fprintf(stderr, "error: out of memory while building or receiving the request\n");
    return 1;
  }
}
