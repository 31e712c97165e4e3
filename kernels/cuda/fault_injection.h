// TEST-ONLY fault injection: a kernel that executes __trap(), which aborts the launch
// with cudaErrorLaunchFailure and leaves the CUDA context of the whole process unusable
// (a sticky error). The server's fault tests use it (CudaDeviceOptions::
// fault_after_batches) to check that a real device fault marks the device unhealthy and
// fails its jobs with INTERNAL. Never call it outside tests: every later CUDA call in the
// process fails. Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_FAULT_INJECTION_H_
#define GEMMD_KERNELS_CUDA_FAULT_INJECTION_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace gemmd::gpu {

// Enqueues a <<<1,1>>> kernel calling __trap() on `stream` (current device). OK once it
// is enqueued (INTERNAL if the launch itself fails); the fault shows up at the stream's
// next synchronization.
absl::Status LaunchTrapKernel(cudaStream_t stream);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_FAULT_INJECTION_H_
