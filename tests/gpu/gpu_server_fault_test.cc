// A real CUDA fault inside the serving server (--inject_fault_after_batches: the first
// GPU runs a trapping kernel before its third batch). The faulted GPU's requests fail
// with INTERNAL and it is marked unhealthy; with another GPU the server keeps serving
// there, with none it reports NOT_SERVING and answers UNAVAILABLE. Its own binary: a
// fault poisons the CUDA context of the whole process. Skips where there is no GPU.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/proto_types.h"
#include "server/batcher.h"
#include "server/cuda/cuda_device_pool.h"
#include "server/gemm_server.h"
#include "server/metrics.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

gemm::v1::MatmulRequest SmallRequest(uint64_t seed) {
  std::mt19937_64 rng(seed);
  gemm::v1::MatmulRequest r;
  for (gemm::v1::Tensor* t : {r.mutable_a(), r.mutable_b()}) {
    t->add_shape(64);
    t->add_shape(64);
    t->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
    t->set_data(testing::RandomBytes(DataType::kFloat32, 64 * 64, rng));
  }
  return r;
}

std::string Health(grpc::Channel* channel) {
  auto health = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  if (!health->Check(&context, {}, &response).ok()) return "ERROR";
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

TEST(GpuServerFaultTest, AFaultedGpuIsTakenOutOfService) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
  ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  config.metrics_port = -1;
  config.backend = "cuda";
  config.max_batch_size = 1;
  config.inject_fault_after_batches = 2;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = gemm::v1::GemmService::NewStub(channel);
  auto call = [&](uint64_t seed, gemm::v1::MatmulResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return stub->Matmul(&context, SmallRequest(seed), response);
  };
  // One call at a time: with all GPUs idle the first GPU takes each (ties go to it).
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(call(1, &response).ok());
  ASSERT_TRUE(call(2, &response).ok());
  const grpc::Status faulted = call(3, &response);
  EXPECT_EQ(faulted.error_code(), grpc::StatusCode::INTERNAL) << faulted.error_message();
  EXPECT_EQ((*server)->executor().HealthyDevices(), gpus - 1);

  if (gpus == 1) {
    const absl::Time limit = absl::Now() + absl::Seconds(10);
    while (Health(channel.get()) == "SERVING" && absl::Now() < limit) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(Health(channel.get()), "NOT_SERVING");
    const grpc::Status after = call(4, &response);
    EXPECT_EQ(after.error_code(), grpc::StatusCode::UNAVAILABLE);
  } else {
    for (uint64_t seed = 4; seed < 12; ++seed) {  // the other GPUs keep serving
      const grpc::Status after = call(seed, &response);
      ASSERT_TRUE(after.ok()) << after.error_message();
      EXPECT_NE(response.device().rfind("cuda:0 ", 0), 0u) << response.device();
    }
    EXPECT_EQ(Health(channel.get()), "SERVING");
  }
  grpc::ClientContext context;
  gemm::v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&context, {}, &info).ok());
  EXPECT_FALSE(info.devices(0).healthy());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace gemmd
