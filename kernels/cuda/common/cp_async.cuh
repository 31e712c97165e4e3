// cp.async, sm_80's asynchronous global -> shared copy, for the pipelines of every
// family (dense WMMA and DMMA, quantized skinny and square): 16 bytes through L2 only
// (.cg), or 8 or 4 bytes (.ca: sizes below 16 go through L1). A copy of `src_bytes` zero-fills the
// rest of its destination (0: nothing is read). Before sm_80 a plain load and store, so older PTX
// targets still compile. .cu files only.
#ifndef GEMMD_KERNELS_CUDA_COMMON_CP_ASYNC_CUH_
#define GEMMD_KERNELS_CUDA_COMMON_CP_ASYNC_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace gemmd::gpu::internal {

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
#else
  *static_cast<uint4*>(smem) =
      src_bytes > 0 ? *static_cast<const uint4*>(gmem) : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void CpAsync8(void* smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
#else
  *static_cast<uint2*>(smem) = src_bytes > 0 ? *static_cast<const uint2*>(gmem) : make_uint2(0, 0);
#endif
}

__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes));
#else
  *static_cast<uint32_t*>(smem) = src_bytes > 0 ? *static_cast<const uint32_t*>(gmem) : 0u;
#endif
}

__device__ __forceinline__ void CpAsyncCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_CP_ASYNC_CUH_
