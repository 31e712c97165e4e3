// How the client library's channels reach a deployment of one or more gemm-server
// replicas: any gRPC target URI ("host:port", "ipv4:10.0.0.1:50051,10.0.0.2:50051",
// "dns:///gemmd-headless:50051"), balanced over all its addresses by round_robin, with
// calls that end UNAVAILABLE (a replica stopping, draining or unreachable) tried again,
// on another replica where there is one. Servers that report NOT_SERVING on the health
// service (draining, or no healthy device) get no calls while they do; a channel for the
// health check itself turns that off (GRPC_ARG_INHIBIT_HEALTH_CHECKING), or it could
// never reach a NOT_SERVING server to hear it say so.
#ifndef GEMMD_CLIENT_CHANNEL_CONFIG_H_
#define GEMMD_CLIENT_CHANNEL_CONFIG_H_

#include <grpcpp/support/channel_arguments.h>

namespace gemmd {

// Sets the service config (round_robin, the health watch, the retry policy) and the
// retry buffer on `args`.
void SetBalancingArguments(grpc::ChannelArguments* args);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CHANNEL_CONFIG_H_
