// The end of every GemmService call, one way for all of them: counted once in
// gemm_requests_total by what its client got, its total duration observed, and, when it
// failed, one request_failed line (rate-limited, with the peer and the tenant), so a
// refused upload or a guessed handle leaves a trace like a refused GEMM. Thread-safe.
#ifndef GEMMD_SERVER_RPC_CALL_REPORT_H_
#define GEMMD_SERVER_RPC_CALL_REPORT_H_

#include <grpcpp/server_context.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"

namespace gemmd {

// A client that cancels at its own deadline reaches the server a little before the
// server's copy of that deadline passes (the server counts from when the headers
// arrived). A cancellation this close to the deadline is counted as the deadline.
inline constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(50);

// The call's deadline (InfiniteFuture without one).
absl::Time DeadlineOf(const grpc::ServerContextBase& context);

// What the client of a call got: `answered` (the status the server finished it with),
// unless the client gave up first (the context is cancelled: its deadline passed, it
// cancelled, the connection went), then DEADLINE_EXCEEDED or CANCELLED saying so and
// quoting the server's answer.
absl::Status ClientOutcome(const grpc::ServerContextBase& context, const absl::Status& answered,
                           absl::Time now);

class CallReporter {
 public:
  // Both outlive the reporter.
  CallReporter(ServerMetrics* metrics, LogRateLimiter* failure_log)
      : metrics_(metrics), failure_log_(failure_log) {}

  void Report(RpcMethod method, PrecisionLabel precision, const absl::Status& outcome,
              absl::string_view tenant, const std::string& peer, absl::Duration took) const;

  ServerMetrics* metrics() const { return metrics_; }

 private:
  ServerMetrics* const metrics_;
  LogRateLimiter* const failure_log_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_CALL_REPORT_H_
