#include "server/log.h"

#include <unistd.h>

#include <atomic>

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

void AppendValue(std::string* line, absl::string_view value) {
  const bool quote = value.empty() || value.find_first_of(" \"=\t\n") != absl::string_view::npos;
  if (!quote) {
    absl::StrAppend(line, value);
    return;
  }
  line->push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') line->push_back('\\');
    if (c == '\n') {
      line->append("\\n");
      continue;
    }
    line->push_back(c);
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

}  // namespace gemmd
