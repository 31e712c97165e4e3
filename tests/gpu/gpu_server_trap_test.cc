// A trap (a real, sticky CUDA fault) on the server's only GPU: the faulting request fails
// with INTERNAL, the GPU is marked unhealthy, the server reports NOT_SERVING and answers
// UNAVAILABLE. Its own executable: the trap poisons CUDA for the whole process (on a
// multi-GPU host every GPU of it), so nothing else may run after it. Skips where there is
// no GPU.
#include <gtest/gtest.h>

#include "gemm/v1/gemm.grpc.pb.h"
#include "server/scheduling/batcher.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "tests/gpu/faulty_server.h"

namespace gemmd::testing {
namespace {

TEST(GpuServerTrapTest, ATrapOnTheOnlyGpuLeavesNothingServing) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
  Served s = StartFaulty("0", FaultKind::kTrap);
  ASSERT_NE(s.server, nullptr);
  const grpc::Status faulted = s.CallsUntilTheFault();
  gemm::v1::MatmulResponse response;
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

}  // namespace
}  // namespace gemmd::testing
