#include <grpc/grpc.h>
#include <grpcpp/client_context.h>

#include <cstdio>

#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client_cli/commands.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace gemmd {

int RunHealth(const CliOptions& o) {
  auto stub = grpc::health::v1::Health::NewStub(
      ConnectChannel(o.server(), 0, {{GRPC_ARG_INHIBIT_HEALTH_CHECKING, 1}}));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(o.timeout_s)));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) return ReportRpcError("health check", status);
  std::printf("%s\n",
              grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 2;
}

}  // namespace gemmd
