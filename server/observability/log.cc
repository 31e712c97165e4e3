#include "server/observability/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gemmd {
namespace {

std::atomic<bool> log_enabled{true};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

bool NeedsQuotes(absl::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

void AppendValue(std::string* line, absl::string_view value) {
  if (!NeedsQuotes(value)) {
    absl::StrAppend(line, value);
    return;
  }
  line->push_back('"');
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        line->append("\\\"");
        break;
      case '\\':
        line->append("\\\\");
        break;
      case '\n':
        line->append("\\n");
        break;
      case '\r':
        line->append("\\r");
        break;
      case '\t':
        line->append("\\t");
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          absl::StrAppend(line, "\\x", absl::Hex(u, absl::kZeroPad2));
        } else {
          line->push_back(c);
        }
    }
  }
  line->push_back('"');
}

}  // namespace

void SetLogEnabled(bool enabled) { log_enabled.store(enabled); }

std::string FormatLogFields(LogLevel level, absl::string_view event,
                            std::initializer_list<LogField> fields) {
  std::string line = absl::StrCat("level=", LevelName(level), " event=", event);
  for (const LogField& field : fields) {
    absl::StrAppend(&line, " ", field.first, "=");
    AppendValue(&line, field.second);
  }
  return line;
}

void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields) {
  if (!log_enabled.load(std::memory_order_relaxed)) return;
  std::string line = absl::StrCat(
      "ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
      FormatLogFields(level, event, fields), "\n");
  // One write(2) per line keeps lines whole under concurrency.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

LogRateLimiter::LogRateLimiter(double per_second, double burst, Clock* clock)
    : per_second_(per_second), burst_(burst), clock_(clock), tokens_(burst), last_(clock->Now()) {}

bool LogRateLimiter::Allow(int64_t* suppressed) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * per_second_);
  last_ = now;
  if (tokens_ < 1.0) {
    ++suppressed_;
    *suppressed = 0;
    return false;
  }
  tokens_ -= 1.0;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

int64_t LogRateLimiter::TakeSuppressed() {
  absl::MutexLock lock(&mu_);
  return std::exchange(suppressed_, 0);
}

}  // namespace gemmd
