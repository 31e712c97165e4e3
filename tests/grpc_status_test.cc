#include "server/rpc/grpc_status.h"

#include <gtest/gtest.h>

namespace gemmd {
namespace {

TEST(GrpcStatusTest, EveryCodeAndMessageMapsOnce) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const std::pair<absl::Status, grpc::StatusCode> cases[] = {
      {absl::InvalidArgumentError("bad"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::FailedPreconditionError("no tc"), grpc::StatusCode::FAILED_PRECONDITION},
      {absl::ResourceExhaustedError("full"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::DeadlineExceededError("late"), grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::CancelledError("gone"), grpc::StatusCode::CANCELLED},
      {absl::UnavailableError("draining"), grpc::StatusCode::UNAVAILABLE},
      {absl::InternalError("cuda fault"), grpc::StatusCode::INTERNAL},
      {absl::NotFoundError("x"), grpc::StatusCode::NOT_FOUND},
  };
  for (const auto& [status, code] : cases) {
    const grpc::Status g = ToGrpcStatus(status);
    EXPECT_EQ(g.error_code(), code) << status;
    EXPECT_EQ(g.error_message(), std::string(status.message()));
  }
}

}  // namespace
}  // namespace gemmd
