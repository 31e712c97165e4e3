// Structured log lines (logfmt) on stderr: `ts=... level=info event=server_started
// backend=cpu port=50051`. One line per call, written atomically, so lines from many
// threads never interleave. Values with spaces, quotes, '=' or any control character are
// quoted, and control characters are escaped (\n, \r, \t, \xHH), so nothing a client
// sends can start a fake line or drive the terminal that shows the log.
#ifndef GEMMD_SERVER_OBSERVABILITY_LOG_H_
#define GEMMD_SERVER_OBSERVABILITY_LOG_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/observability/clock.h"

namespace gemmd {

enum class LogLevel { kInfo, kWarning, kError };

using LogField = std::pair<absl::string_view, std::string>;

void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields = {});

// The line Log() writes, without the timestamp field and the newline (tests).
std::string FormatLogFields(LogLevel level, absl::string_view event,
                            std::initializer_list<LogField> fields);

// Tests silence the log (it stays on by default).
void SetLogEnabled(bool enabled);

// A token bucket for lines that a flood of bad requests could repeat without end: lets
// `burst` through at once and `per_second` on average, and counts the ones it holds
// back. Thread-safe.
class LogRateLimiter {
 public:
  LogRateLimiter(double per_second, double burst, Clock* clock = Clock::Real());

  // True when a line may be written now; then *suppressed is how many were held back
  // since the last line that was let through (0 otherwise).
  bool Allow(int64_t* suppressed);
  // Lines held back since the last one let through (for a final report).
  int64_t TakeSuppressed();

 private:
  const double per_second_;
  const double burst_;
  Clock* const clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_OBSERVABILITY_LOG_H_
