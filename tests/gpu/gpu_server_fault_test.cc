// A GPU of the serving server fails a launch (one the runtime rejects: the context stays
// usable): its requests fail with INTERNAL and it is marked unhealthy; with another GPU
// the server keeps serving there, with none it reports NOT_SERVING and answers
// UNAVAILABLE. The trap variant is gpu_server_trap_test (its own process). Skips where
// there is no GPU.
#include <gtest/gtest.h>

#include "gemm/v1/gemm.grpc.pb.h"
#include "server/scheduling/batcher.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "tests/gpu/faulty_server.h"

namespace gemmd::testing {
namespace {

TEST(GpuServerFaultTest, AFaultedGpuLeavesTheOthersServing) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
  Served s = StartFaulty("all", FaultKind::kLaunchError);
  ASSERT_NE(s.server, nullptr);
  const grpc::Status faulted = s.CallsUntilTheFault();
  gemm::v1::MatmulResponse response;
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
}  // namespace gemmd::testing
