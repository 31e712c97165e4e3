// CPU time a process has used (user + system, from /proc/PID/stat), so `gemm-cli bench`
// can report what each request cost the server (--server_pid) and itself; and the CPU
// time the whole host has used (/proc/stat), so it can say whether the host's cores
// were all busy (client and server share them in a loopback benchmark).
#ifndef GEMMD_CLIENT_CLI_PROCESS_CPU_H_
#define GEMMD_CLIENT_CLI_PROCESS_CPU_H_

#include "absl/status/statusor.h"

namespace gemmd {

// Seconds of CPU `pid` has used so far (0 = this process). NOT_FOUND when there is no
// such process (or no /proc), INTERNAL when its stat line cannot be read.
absl::StatusOr<double> ProcessCpuSeconds(int pid);

// Seconds of CPU every core of the host has spent busy so far, summed (user, nice,
// system, irq and softirq: not idle, iowait, or time a hypervisor stole). NOT_FOUND without
// /proc/stat, INTERNAL when its first line cannot be read.
absl::StatusOr<double> HostBusyCpuSeconds();

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_PROCESS_CPU_H_
