// Structured log lines (logfmt) on stderr: `ts=... level=info event=server_started
// backend=cpu port=50051`. One line per call, written atomically, so lines from many
// threads never interleave. Values with spaces or quotes are quoted.
#ifndef GEMMD_SERVER_LOG_H_
#define GEMMD_SERVER_LOG_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace gemmd {

enum class LogLevel { kInfo, kWarning, kError };

using LogField = std::pair<absl::string_view, std::string>;

void Log(LogLevel level, absl::string_view event, std::initializer_list<LogField> fields = {});

// The line Log() writes, without the timestamp field and the newline (tests).
std::string FormatLogFields(LogLevel level, absl::string_view event,
                            std::initializer_list<LogField> fields);

// Tests silence the log (it stays on by default).
void SetLogEnabled(bool enabled);

}  // namespace gemmd

#endif  // GEMMD_SERVER_LOG_H_
