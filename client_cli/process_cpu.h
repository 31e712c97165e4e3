// CPU time a process has used (user + system, from /proc/PID/stat), so `gemm-cli bench`
// can report what each request cost the server (--server_pid) and itself.
#ifndef GEMMD_CLIENT_CLI_PROCESS_CPU_H_
#define GEMMD_CLIENT_CLI_PROCESS_CPU_H_

#include "absl/status/statusor.h"

namespace gemmd {

// Seconds of CPU `pid` has used so far (0 = this process). NOT_FOUND when there is no
// such process (or no /proc), INTERNAL when its stat line cannot be read.
absl::StatusOr<double> ProcessCpuSeconds(int pid);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_PROCESS_CPU_H_
