#include "server/stop_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

int signal_pipe[2] = {-1, -1};

void WriteEvent(unsigned char byte) {
  ssize_t ignored = write(signal_pipe[1], &byte, 1);
  (void)ignored;
}

extern "C" void OnStopSignal(int signal_number) {
  const int saved_errno = errno;  // the interrupted thread's
  WriteEvent(static_cast<unsigned char>(signal_number));
  errno = saved_errno;
}

}  // namespace

absl::Status InstallStopSignals() {
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2 for the stop signals: ", std::strerror(errno)));
  }
  fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);  // a flood of signals never blocks a handler
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, nullptr) != 0 || sigaction(SIGINT, &action, nullptr) != 0 ||
      sigaction(SIGHUP, &action, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("cannot install the SIGTERM/SIGINT/SIGHUP handlers: ",
                                            std::strerror(errno)));
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);  // in case the parent blocked them
  return absl::OkStatus();
}

int NextStopEvent() {
  unsigned char byte = 0;
  while (true) {
    const ssize_t n = read(signal_pipe[0], &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

void NotifyStopDone() { WriteEvent(0); }

const char* SignalName(int signal_number) {
  if (signal_number == SIGTERM) return "SIGTERM";
  if (signal_number == SIGINT) return "SIGINT";
  if (signal_number == SIGHUP) return "SIGHUP";
  return "other";
}

}  // namespace gemmd
