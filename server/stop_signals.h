// SIGTERM and SIGINT (stop) and SIGHUP (reload the tokens file) for gemm-server's main():
// the signals arrive as events on a pipe, read in order, so the first stop signal starts
// the drain and repeats can be noted and ignored.
//
// Why a handler and a pipe, not a blocked mask and sigwait(): libraries start threads
// before main() runs (OpenBLAS starts its pool while it loads), those threads keep the
// signals unblocked, and a second SIGTERM delivered to one of them killed the process
// mid-drain. A handler runs on whichever thread the kernel picks and only writes the
// signal number to the pipe.
#ifndef GEMMD_SERVER_STOP_SIGNALS_H_
#define GEMMD_SERVER_STOP_SIGNALS_H_

#include "absl/status/status.h"

namespace gemmd {

// Installs the handlers (once, before the server starts). INTERNAL when the pipe or a
// handler cannot be set up.
absl::Status InstallStopSignals();

// Blocks for the next event: a signal number, or 0 once NotifyStopDone() was called (or
// the pipe failed).
int NextStopEvent();

// Makes NextStopEvent() return 0 (the drain is done). Thread-safe.
void NotifyStopDone();

const char* SignalName(int signal_number);

}  // namespace gemmd

#endif  // GEMMD_SERVER_STOP_SIGNALS_H_
