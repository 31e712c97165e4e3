#include "kernels/cuda/common/dynamic_smem.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda/common/cuda_status.h"

namespace gemmd::gpu::internal {

absl::Status EnsureDynamicSmem(const void* func, int bytes, std::atomic<uint64_t>* done_mask) {
  int device = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done_mask->load(std::memory_order_acquire) & bit) != 0) {
    return absl::OkStatus();
  }
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (bit != 0) done_mask->fetch_or(bit, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace gemmd::gpu::internal
