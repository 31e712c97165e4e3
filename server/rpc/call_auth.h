// Who a call comes from: its tenant, from the `authorization: Bearer TOKEN` metadata
// checked against the server's tokens (server/security/auth_tokens.h). Every GemmService
// method asks before doing anything; grpc.health.v1 and reflection do not (probes and
// tools carry no token). A refused call is counted (UNAUTHENTICATED, without a tenant)
// and logged (rate-limited) without the token.
#ifndef GEMMD_SERVER_RPC_CALL_AUTH_H_
#define GEMMD_SERVER_RPC_CALL_AUTH_H_

#include <grpcpp/server_context.h>

#include <string>

#include "absl/status/statusor.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "server/security/auth_tokens.h"

namespace gemmd {

class CallAuth {
 public:
  // `tokens` null: no authentication, every call is tenant "".
  CallAuth(const TokenAuthenticator* tokens, ServerMetrics* metrics, LogRateLimiter* failure_log)
      : tokens_(tokens), metrics_(metrics), failure_log_(failure_log) {}

  bool enabled() const { return tokens_ != nullptr; }
  // The caller's tenant; UNAUTHENTICATED (already counted and logged) otherwise.
  absl::StatusOr<std::string> TenantOf(const grpc::ServerContextBase& context,
                                       RpcMethod method) const;

 private:
  const TokenAuthenticator* const tokens_;
  ServerMetrics* const metrics_;
  LogRateLimiter* const failure_log_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_CALL_AUTH_H_
