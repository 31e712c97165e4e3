// Internal device helpers shared by the kernel families (.cu files only).
#ifndef GEMMD_KERNELS_CUDA_COMMON_DEVICE_UTIL_CUH_
#define GEMMD_KERNELS_CUDA_COMMON_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gemmd::gpu::internal {

template <typename T>
__device__ __forceinline__ float ToFloat(T x);
template <>
__device__ __forceinline__ float ToFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ float ToFloat<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Maps a linear block index onto (tile_m, tile_n) so that consecutive blocks walk down
// a group of kGroup tile rows before moving right: the B columns a group shares stay
// in L2 while its A rows are reused across the group.
template <int kGroup>
__device__ __forceinline__ void SwizzleTile(int linear, int tiles_m, int tiles_n,
                                            int* tile_m, int* tile_n) {
  const int per_group = kGroup * tiles_n;
  const int group = linear / per_group;
  const int first_m = group * kGroup;
  const int rows = min(tiles_m - first_m, kGroup);
  const int in_group = linear - group * per_group;
  *tile_m = first_m + in_group % rows;
  *tile_n = in_group / rows;
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_DEVICE_UTIL_CUH_
