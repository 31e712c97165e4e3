// grpc.health.v1 and server reflection, both served on the call queues: Check and Watch
// by name through a device fault and a shutdown, and the services reflection lists.
#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/observability/log.h"
#include "tests/fake_device.h"
#include "tests/server_fixture.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;
using ::gemmd::testing::RandomRequest;
using ::gemmd::testing::TestConfig;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthAndReflectionTest : public ::gemmd::testing::InProcessServerTest {
 protected:
  void SetUp() override { SetLogEnabled(false); }

  grpc::Status Check(const std::string& service, HealthCheckResponse* response) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    HealthCheckRequest request;
    request.set_service(service);
    return health->Check(&context, request, response);
  }
};

TEST_F(HealthAndReflectionTest, CheckAnswersTheServerAndTheServiceByName) {
  Start();
  HealthCheckResponse response;
  ASSERT_TRUE(Check("", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  ASSERT_TRUE(Check("gemm.v1.GemmService", &response).ok());
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  const grpc::Status unknown = Check("no.such.Service", &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(unknown.error_message(), "no health status for service 'no.such.Service'");
}

// A Watch hears the status at once, the fault's NOT_SERVING when it comes, and ends when
// the server shuts down; one for a name never set hears SERVICE_UNKNOWN.
TEST_F(HealthAndReflectionTest, WatchHearsEachChangeAndEndsAtShutdown) {
  auto device = std::make_unique<FakeDevice>();
  device->FailWith(absl::InternalError("cuda:0 fault: unspecified launch failure"),
                   /*fault=*/true);
  Start(TestConfig(), std::move(device));
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  HealthCheckRequest request;
  request.set_service("gemm.v1.GemmService");
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> watch = health->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  grpc::ClientContext unknown_context;
  unknown_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  request.set_service("no.such.Service");
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> unknown =
      health->Watch(&unknown_context, request);
  ASSERT_TRUE(unknown->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  unknown_context.TryCancel();
  EXPECT_EQ(unknown->Finish().error_code(), grpc::StatusCode::CANCELLED);

  gemm::v1::MatmulResponse result;
  EXPECT_EQ(Call(RandomRequest(4, 4, 4, 1), &result).error_code(), grpc::StatusCode::INTERNAL);
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);

  const absl::Time shutdown_started = absl::Now();
  server_->Shutdown();
  EXPECT_FALSE(watch->Read(&response));
  const grpc::Status ended = watch->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ended.error_message(), "the server is shutting down");
  // The watch did not hold the shutdown back to gRPC's deadline (1 s).
  EXPECT_LT(absl::Now() - shutdown_started, absl::Milliseconds(900));
}

// Reflection lists both services (gRPC lists only services with a method registered by
// name: GetServerInfo and Check are).
TEST_F(HealthAndReflectionTest, ReflectionListsTheServices) {
  Start();
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto await = [&queue](void* expected) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue.Next(&tag, &ok));
    EXPECT_EQ(tag, expected);
    return ok;
  };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
  int tags[5];
  call->StartCall(&tags[0]);
  ASSERT_TRUE(await(&tags[0]));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  const std::string list_services("\x3a\x00", 2);
  grpc::Slice slice(list_services);
  call->Write(grpc::ByteBuffer(&slice, 1), &tags[1]);
  ASSERT_TRUE(await(&tags[1]));
  call->WritesDone(&tags[2]);
  ASSERT_TRUE(await(&tags[2]));
  grpc::ByteBuffer reply;
  call->Read(&reply, &tags[3]);
  ASSERT_TRUE(await(&tags[3]));
  grpc::Status status;
  call->Finish(&status, &tags[4]);
  ASSERT_TRUE(await(&tags[4]));
  ASSERT_TRUE(status.ok()) << status.error_message();
  grpc::Slice flat;
  ASSERT_TRUE(reply.TrySingleSlice(&flat).ok() || reply.DumpToSingleSlice(&flat).ok());
  const std::string bytes(reinterpret_cast<const char*>(flat.begin()), flat.size());
  EXPECT_TRUE(absl::StrContains(bytes, "gemm.v1.GemmService")) << bytes;
  EXPECT_TRUE(absl::StrContains(bytes, "grpc.health.v1.Health")) << bytes;
  EXPECT_TRUE(absl::StrContains(bytes, "grpc.reflection.v1alpha.ServerReflection")) << bytes;
}

}  // namespace
}  // namespace gemmd
