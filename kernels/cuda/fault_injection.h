// TEST-ONLY fault injection (CudaDeviceOptions::fault_after_batches), two kinds:
// - a kernel that executes __trap(): the launch aborts with cudaErrorLaunchFailure, a
//   sticky error. On the H200 host (driver 580) it also poisoned the other GPU of the
//   process: every later CUDA call on either GPU failed. Never call it outside tests.
// - a launch with an invalid configuration (cudaErrorInvalidConfiguration): an error the
//   CUDA runtime reports and forgets, so only the device the server marks unhealthy
//   stops serving and the other GPUs can show that serving goes on.
// Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_FAULT_INJECTION_H_
#define GEMMD_KERNELS_CUDA_FAULT_INJECTION_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace gemmd::gpu {

// Enqueues a <<<1,1>>> kernel calling __trap() on `stream` (current device). OK once it
// is enqueued (INTERNAL if the launch itself fails); the fault shows up at the stream's
// next synchronization.
absl::Status LaunchTrapKernel(cudaStream_t stream);

// Launches a kernel with 4096 threads per block (over every GPU's limit) on `stream`:
// always INTERNAL (cudaErrorInvalidConfiguration), the context stays usable.
absl::Status LaunchInvalidKernel(cudaStream_t stream);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_FAULT_INJECTION_H_
