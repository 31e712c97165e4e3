#include "server/library_logs.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"

namespace gemmd {
namespace {

LogRateLimiter& GrpcLimiter() {
  static LogRateLimiter* const limiter = new LogRateLimiter(10, 20);
  return *limiter;
}

LogRateLimiter& ProtobufLimiter() {
  static LogRateLimiter* const limiter = new LogRateLimiter(10, 20);
  return *limiter;
}

void LogFromGrpc(gpr_log_func_args* args) {
  int64_t suppressed = 0;
  if (!GrpcLimiter().Allow(&suppressed)) return;
  const LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR  ? LogLevel::kError
                         : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo
                                                                   : LogLevel::kWarning;
  Log(level, "grpc_log",
      {{"at", absl::StrCat(args->file, ":", args->line)},
       {"message", args->message},
       {"suppressed_before", absl::StrCat(suppressed)}});
}

void LogFromProtobuf(google::protobuf::LogLevel severity, const char* file, int line,
                     const std::string& message) {
  int64_t suppressed = 0;
  if (!ProtobufLimiter().Allow(&suppressed)) return;
  const LogLevel level = severity >= google::protobuf::LOGLEVEL_ERROR     ? LogLevel::kError
                         : severity == google::protobuf::LOGLEVEL_WARNING ? LogLevel::kWarning
                                                                          : LogLevel::kInfo;
  Log(level, "protobuf_log",
      {{"at", absl::StrCat(file, ":", line)},
       {"message", message},
       {"suppressed_before", absl::StrCat(suppressed)}});
}

}  // namespace

void RouteLibraryLogs() {
  gpr_set_log_function(LogFromGrpc);
  google::protobuf::SetLogHandler(LogFromProtobuf);
}

}  // namespace gemmd
