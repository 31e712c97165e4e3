// TEST-ONLY: a kernel that traps, for the device fault tests (see fault_injection.h).
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fault_injection.h"

namespace gemmd::gpu {
namespace {

__global__ void TrapKernel() { __trap(); }

}  // namespace

absl::Status LaunchTrapKernel(cudaStream_t stream) {
  TrapKernel<<<1, 1, 0, stream>>>();
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gemmd::gpu
