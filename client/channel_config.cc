#include "client/channel_config.h"

#include <grpc/grpc.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace gemmd {

const char* DefaultServiceConfigJson() {
  // healthCheckConfig: the channel watches each server's grpc.health.v1 status and sends
  // nothing to one that says NOT_SERVING. A draining server says so first thing; without
  // the watch, round_robin would keep giving it a share of the calls, each refused and
  // retried, and it would never see the quiet that ends its drain early.
  // Every method of both services: the GEMM calls are pure functions of their request,
  // and the tensor-store calls either have not reached the server or were refused
  // before doing anything when they end UNAVAILABLE, so a second attempt is safe.
  static const std::string* json = new std::string(absl::StrCat(
      R"({"loadBalancingConfig":[{"round_robin":{}}],)",
      R"("healthCheckConfig":{"serviceName":""},)",
      R"("methodConfig":[{"name":[{"service":"gemm.v1.GemmService"},)",
      R"({"service":"grpc.health.v1.Health"}],)",
      R"("retryPolicy":{"maxAttempts":)", kMaxCallAttempts,
      R"(,"initialBackoff":"0.05s","maxBackoff":"0.5s","backoffMultiplier":2,)",
      R"("retryableStatusCodes":["UNAVAILABLE"]}}]})"));
  return json->c_str();
}

void SetBalancingArguments(grpc::ChannelArguments* args) {
  args->SetServiceConfigJSON(DefaultServiceConfigJson());
  args->SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, kRetryBufferBytesPerCall);
}

}  // namespace gemmd
