#include "server/rpc/call_report.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace gemmd {

absl::Time DeadlineOf(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

absl::Status ClientOutcome(const grpc::ServerContextBase& context, const absl::Status& answered,
                           absl::Time now) {
  if (!context.IsCancelled()) return answered;
  if (now >= DeadlineOf(context) - kDeadlineSlack) {
    return absl::DeadlineExceededError(
        answered.ok()
            ? "the deadline passed before the response was sent"
            : absl::StrCat("the deadline passed; the server's answer was: ", answered.message()));
  }
  return absl::CancelledError(
      answered.ok()
          ? "the client cancelled before the response was sent"
          : absl::StrCat("the client cancelled; the server's answer was: ", answered.message()));
}

void CallReporter::Report(RpcMethod method, PrecisionLabel precision, const absl::Status& outcome,
                          absl::string_view tenant, const std::string& peer,
                          absl::Duration took) const {
  metrics_->RecordRequest(method, precision, outcome.code(), tenant);
  metrics_->ObservePhase(method, Phase::kTotal, took);
  if (outcome.ok()) return;
  int64_t suppressed = 0;
  if (!failure_log_->Allow(&suppressed)) return;
  Log(LogLevel::kWarning, "request_failed",
      {{"method", RpcMethodName(method)},
       {"code", absl::StatusCodeToString(outcome.code())},
       {"message", std::string(outcome.message())},
       {"peer", peer},
       {"tenant", std::string(tenant)},
       {"suppressed_before", absl::StrCat(suppressed)}});
}

}  // namespace gemmd
