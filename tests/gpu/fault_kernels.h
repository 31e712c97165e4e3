// Two ways to make a GPU fail, for the fault tests (FaultInjectingDevice):
// - a kernel that executes __trap(): the launch aborts with cudaErrorLaunchFailure, a
//   sticky error. On a multi-GPU host it can poison every GPU of the process, so a test
//   that traps serves on one GPU and runs in its own process.
// - a launch with an invalid configuration (cudaErrorInvalidConfiguration): an error the
//   CUDA runtime reports and forgets, so the context stays usable.
// Host-only header; compiles with g++.
#ifndef GEMMD_TESTS_GPU_FAULT_KERNELS_H_
#define GEMMD_TESTS_GPU_FAULT_KERNELS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace gemmd::testing {

// Enqueues a <<<1,1>>> kernel calling __trap() on `stream` (current device). OK once it
// is enqueued (INTERNAL if the launch itself fails); the fault shows up at the stream's
// next synchronization.
absl::Status LaunchTrapKernel(cudaStream_t stream);

// Launches a kernel with 4096 threads per block (over every GPU's limit) on `stream`:
// always INTERNAL (cudaErrorInvalidConfiguration), the context stays usable.
absl::Status LaunchInvalidKernel(cudaStream_t stream);

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_GPU_FAULT_KERNELS_H_
