// Names the calling thread (what `top -H`, `ps -L` and /proc/PID/task/TID/comm show), so
// the server's CPU can be split by role without a profiler: "gemmd-cq0" a call queue's
// poller, "gemmd-lane0.1" device 0's lane 1, "gemmd-answer" the completion threads, and so
// on. Linux keeps 15 bytes of a name; longer ones are cut there.
#ifndef GEMMD_SERVER_OBSERVABILITY_THREAD_NAME_H_
#define GEMMD_SERVER_OBSERVABILITY_THREAD_NAME_H_

#include "absl/strings/string_view.h"

namespace gemmd {

void NameThisThread(absl::string_view name);

}  // namespace gemmd

#endif  // GEMMD_SERVER_OBSERVABILITY_THREAD_NAME_H_
