// The whole server on the CUDA backend with its first GPU wrapped in a
// FaultInjectingDevice, for the server fault tests (each in its own executable: a trap
// poisons CUDA for the process).
#ifndef GEMMD_TESTS_GPU_FAULTY_SERVER_H_
#define GEMMD_TESTS_GPU_FAULTY_SERVER_H_

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/proto_types.h"
#include "server/gemm_server.h"
#include "tests/gpu/fault_injecting_device.h"
#include "tests/test_util.h"

namespace gemmd::testing {

inline gemm::v1::MatmulRequest SmallRequest(uint64_t seed) {
  std::mt19937_64 rng(seed);
  gemm::v1::MatmulRequest r;
  for (gemm::v1::Tensor* t : {r.mutable_a(), r.mutable_b()}) {
    t->add_shape(64);
    t->add_shape(64);
    t->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
    t->set_data(RandomBytes(DataType::kFloat32, 64 * 64, rng));
  }
  return r;
}

inline std::string Health(grpc::Channel* channel) {
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
  // Two calls that succeed, then the one the first GPU fails: its status.
  grpc::Status CallsUntilTheFault() {
    gemm::v1::MatmulResponse response;
    EXPECT_TRUE(Call(1, &response).ok());
    EXPECT_TRUE(Call(2, &response).ok());
    return Call(3, &response);
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
inline Served StartFaulty(const std::string& devices, FaultKind kind) {
  ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  config.metrics_port = -1;
  config.max_batch_size = 1;
  absl::StatusOr<Backend> opened = OpenCudaBackendFirstFaulty(devices, kind, /*fault_at_batch=*/2);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return Served();
  absl::StatusOr<std::unique_ptr<GemmServer>> server =
      GemmServer::CreateWithBackend(config, *std::move(opened));
  EXPECT_TRUE(server.ok()) << server.status();
  Served s;
  if (!server.ok()) return s;
  s.server = *std::move(server);
  s.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", s.server->port()),
                                  grpc::InsecureChannelCredentials());
  s.stub = gemm::v1::GemmService::NewStub(s.channel);
  return s;
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_GPU_FAULTY_SERVER_H_
