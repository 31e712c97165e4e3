#include "tests/gpu/fault_kernels.h"

#include "kernels/cuda/common/cuda_status.h"

namespace gemmd::testing {
namespace {

__global__ void TrapKernel() { __trap(); }
__global__ void NeverRunsKernel() {}

}  // namespace

absl::Status LaunchTrapKernel(cudaStream_t stream) {
  TrapKernel<<<1, 1, 0, stream>>>();
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchInvalidKernel(cudaStream_t stream) {
  NeverRunsKernel<<<1, 4096, 0, stream>>>();
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::InternalError("a launch of 4096 threads per block did not fail");
}

}  // namespace gemmd::testing
