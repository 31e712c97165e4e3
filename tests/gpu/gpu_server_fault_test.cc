// Device faults inside the serving server (--inject_fault_after_batches: the first GPU
// fails its third batch). The faulted GPU's requests fail with INTERNAL and it is marked
// unhealthy; with another GPU the server keeps serving there, with none it reports
// NOT_SERVING and answers UNAVAILABLE. Two kinds: a trapping kernel (a sticky fault that
// can poison every GPU of the process, so that test serves on GPU 0 alone) and a launch
// the runtime rejects (only the first GPU is lost). Its own binary, and ctest runs each
// test in its own process: a trap poisons CUDA for the process. By hand, run them one
// at a time (--gtest_filter). Skips where there is no GPU.
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

struct Served {
  std::unique_ptr<GemmServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<gemm::v1::GemmService::Stub> stub;

  grpc::Status Call(uint64_t seed, gemm::v1::MatmulResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return stub->Matmul(&context, SmallRequest(seed), response);
  }
  void AwaitHealth(const std::string& status) {
    const absl::Time limit = absl::Now() + absl::Seconds(10);
    while (Health(channel.get()) != status && absl::Now() < limit) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  bool FirstDeviceHealthy() {
    grpc::ClientContext context;
    gemm::v1::ServerInfo info;
    EXPECT_TRUE(stub->GetServerInfo(&context, {}, &info).ok());
    return info.devices(0).healthy();
  }
};

// One call at a time: with every GPU idle the first one takes each (ties go to it), so
// the third call is the faulting one.
Served StartFaulty(const std::string& devices, const std::string& kind) {
  ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  config.metrics_port = -1;
  config.backend = "cuda";
  config.devices = devices;
  config.max_batch_size = 1;
  config.inject_fault_after_batches = 2;
  config.inject_fault_kind = kind;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  EXPECT_TRUE(server.ok()) << server.status();
  Served s;
  if (!server.ok()) return s;
  s.server = *std::move(server);
  s.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", s.server->port()),
                                  grpc::InsecureChannelCredentials());
  s.stub = gemm::v1::GemmService::NewStub(s.channel);
  return s;
}

TEST(GpuServerFaultTest, ATrapOnTheOnlyGpuLeavesNothingServing) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
  Served s = StartFaulty("0", "trap");
  ASSERT_NE(s.server, nullptr);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(s.Call(1, &response).ok());
  ASSERT_TRUE(s.Call(2, &response).ok());
  const grpc::Status faulted = s.Call(3, &response);
  EXPECT_EQ(faulted.error_code(), grpc::StatusCode::INTERNAL) << faulted.error_message();
  EXPECT_NE(faulted.error_message().find("unspecified launch failure"), std::string::npos)
      << faulted.error_message();
  s.AwaitHealth("NOT_SERVING");
  EXPECT_EQ(Health(s.channel.get()), "NOT_SERVING");
  const grpc::Status after = s.Call(4, &response);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(after.error_message(), "no healthy device: every device of this server has faulted");
  EXPECT_FALSE(s.FirstDeviceHealthy());
  s.server->Shutdown();
}

TEST(GpuServerFaultTest, AFaultedGpuLeavesTheOthersServing) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
  Served s = StartFaulty("all", "launch_error");
  ASSERT_NE(s.server, nullptr);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(s.Call(1, &response).ok());
  ASSERT_TRUE(s.Call(2, &response).ok());
  const grpc::Status faulted = s.Call(3, &response);
  EXPECT_EQ(faulted.error_code(), grpc::StatusCode::INTERNAL) << faulted.error_message();
  EXPECT_EQ(s.server->executor().HealthyDevices(), gpus - 1);
  EXPECT_FALSE(s.FirstDeviceHealthy());
  if (gpus == 1) {
    s.AwaitHealth("NOT_SERVING");
    EXPECT_EQ(Health(s.channel.get()), "NOT_SERVING");
    EXPECT_EQ(s.Call(4, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  } else {
    for (uint64_t seed = 4; seed < 12; ++seed) {
      const grpc::Status after = s.Call(seed, &response);
      ASSERT_TRUE(after.ok()) << after.error_message();
      EXPECT_NE(response.device().rfind("cuda:0 ", 0), 0u) << response.device();
    }
    EXPECT_EQ(Health(s.channel.get()), "SERVING");
  }
  s.server->Shutdown();
}

}  // namespace
}  // namespace gemmd
