// Shared by the GPU tests: whether this machine has a CUDA device, and the skip that
// makes GPU tests visible (not silent) where it has none.
#ifndef GEMMD_TESTS_GPU_GPU_TEST_UTIL_H_
#define GEMMD_TESTS_GPU_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace gemmd::testing {

inline bool HasGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace gemmd::testing

#define SKIP_WITHOUT_GPU()                                                                \
  do {                                                                                    \
    if (!::gemmd::testing::HasGpu()) GTEST_SKIP() << "no CUDA device here: GPU test skipped"; \
  } while (false)

#endif  // GEMMD_TESTS_GPU_GPU_TEST_UTIL_H_
