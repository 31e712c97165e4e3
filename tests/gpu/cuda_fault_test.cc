// A real CUDA fault on a CudaDevice: a trapping kernel (FaultInjectingDevice) poisons the
// context, the faulting batch fails with INTERNAL, the device turns unhealthy and later
// batches are refused with UNAVAILABLE without touching the GPU. Its own executable: after the trap no CUDA call in this process works, so it
// must not share a process with other GPU tests. Skipped (visibly) without a GPU.
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kernels/cuda/gpu_gemm.h"
#include "server/devices/cuda/cuda_device.h"
#include "tests/gpu/fault_injecting_device.h"
#include "tests/gpu/gpu_test_util.h"

namespace gemmd {
namespace {

// A 32x32x32 FP32 job of all-ones operands: every element of C is 32.
struct OnesJob {
  static constexpr int64_t kSize = 32;
  std::vector<float> a = std::vector<float>(kSize * kSize, 1.0f);
  std::vector<float> b = std::vector<float>(kSize * kSize, 1.0f);
  std::vector<float> c = std::vector<float>(kSize * kSize, 0.0f);

  DeviceLaunch ToLaunch() {
    LaunchItem item;
    item.problem.m = item.problem.n = item.problem.k = kSize;
    item.host = {a.data(), b.data(), nullptr, c.data()};
    DeviceLaunch launch;
    launch.kernel = gpu::KernelRegistry::Global().Find("sgemm_simt_128x128x8");
    launch.problem = item.problem;
    launch.items.push_back(item);
    return launch;
  }
};

TEST(CudaFaultTest, FaultMakesTheDeviceUnhealthyAndLaterBatchesUnavailable) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaDevice>> created = CudaDevice::Create(0, {});
  ASSERT_TRUE(created.ok()) << created.status();
  const CudaDevice& cuda = **created;
  testing::FaultInjectingDevice device(*std::move(created), 0, testing::FaultKind::kTrap,
                                       /*fault_at_batch=*/1);

  OnesJob first;
  LaunchTimes run;
  const absl::Status ok = device.Run(first.ToLaunch(), 0, &run);
  ASSERT_TRUE(ok.ok()) << ok;
  EXPECT_EQ(first.c[0], 32.0f);
  EXPECT_EQ(first.c.back(), 32.0f);
  EXPECT_TRUE(device.healthy());

  OnesJob second;
  const absl::Status fault = device.Run(second.ToLaunch(), 1, &run);
  EXPECT_EQ(fault.code(), absl::StatusCode::kInternal) << fault;
  EXPECT_TRUE(absl::StrContains(fault.message(), "cuda:0")) << fault;
  EXPECT_FALSE(device.healthy());
  EXPECT_FALSE(cuda.healthy());  // the CudaDevice met the fault itself

  OnesJob third;
  const absl::Time start = absl::Now();
  const absl::Status refused = device.Run(third.ToLaunch(), 0, &run);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "cuda:0 is unhealthy")) << refused;
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(third.c[0], 0.0f);  // never touched
  EXPECT_FALSE(device.healthy());
  // Metrics still read the device after the fault.
  EXPECT_GT(device.memory().device_limit_bytes, 0);
}

}  // namespace
}  // namespace gemmd
