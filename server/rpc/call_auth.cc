#include "server/rpc/call_auth.h"

#include "absl/strings/str_cat.h"

namespace gemmd {

absl::StatusOr<std::string> CallAuth::TenantOf(const grpc::ServerContextBase& context,
                                               RpcMethod method) const {
  if (tokens_ == nullptr) return std::string();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  const bool present = it != metadata.end();
  absl::StatusOr<std::string> tenant = tokens_->Authenticate(
      present, present ? absl::string_view(it->second.data(), it->second.size())
                       : absl::string_view());
  if (tenant.ok()) return tenant;
  metrics_->RecordRequest(method, PrecisionLabel::None(), tenant.status().code());
  int64_t suppressed = 0;
  if (failure_log_->Allow(&suppressed)) {
    Log(LogLevel::kWarning, "request_failed",
        {{"method", RpcMethodName(method)},
         {"code", absl::StatusCodeToString(tenant.status().code())},
         {"message", std::string(tenant.status().message())},
         {"peer", context.peer()},
         {"tenant", ""},
         {"suppressed_before", absl::StrCat(suppressed)}});
  }
  return tenant.status();
}

}  // namespace gemmd
