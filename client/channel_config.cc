#include "client/channel_config.h"

#include <grpc/grpc.h>

namespace gemmd {
namespace {

// healthCheckConfig: the channel watches each server's grpc.health.v1 status and sends
// nothing to one that says NOT_SERVING. A draining server says so first thing; without
// the watch, round_robin would keep giving it a share of the calls, each refused and
// retried, and it would never see the quiet that ends its drain early.
// retryPolicy, on every method of both services: the GEMM calls are pure functions of
// their request, and the tensor-store calls either have not reached the server or were
// refused before doing anything when they end UNAVAILABLE, so a second attempt is safe.
// 4 attempts (the first included): enough to step past one or two replicas that are
// going away, few enough that a lone stopped server answers in well under a second.
constexpr char kServiceConfigJson[] =
    R"({"loadBalancingConfig":[{"round_robin":{}}],)"
    R"("healthCheckConfig":{"serviceName":""},)"
    R"("methodConfig":[{"name":[{"service":"gemm.v1.GemmService"},)"
    R"({"service":"grpc.health.v1.Health"}],)"
    R"("retryPolicy":{"maxAttempts":4,"initialBackoff":"0.05s","maxBackoff":"0.5s",)"
    R"("backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]})";

// A request is retried only while gRPC still holds all of it: up to this many bytes per
// call. gRPC's default (256 KiB) would leave every request with a real matrix
// unretriable, and a draining server answers calls that arrive after its signal
// UNAVAILABLE, to be retried on another. gRPC keeps the request's slices
// (reference-counted), not a copy: the server's default --max_message_bytes.
constexpr int kRetryBufferBytesPerCall = 512 << 20;

}  // namespace

void SetBalancingArguments(grpc::ChannelArguments* args) {
  args->SetServiceConfigJSON(kServiceConfigJson);
  args->SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, kRetryBufferBytesPerCall);
}

}  // namespace gemmd
