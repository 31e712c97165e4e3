// What the four square kernels (INT8 / NVFP4, mma.sync / wgmma) share around their main
// loops: a one-dimensional grid over C's output tiles, launched with the kernel's shared
// memory raised once per device, and each block's tile of it; the wgmma kernels' aligned
// shared memory; the scale that undoes the NVFP4 decode; and the epilogue's store of two
// neighbouring results. .cu files only.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_SQUARE_TILES_CUH_
#define GEMMD_KERNELS_CUDA_QUANTIZED_SQUARE_TILES_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/quantized/quant_gemm.h"

namespace gemmd::gpu::internal {

// The first row and column of C this block computes: its tile of a LaunchOverTiles grid,
// swizzled so that neighbouring blocks share B's tiles in L2.
template <int kBM, int kBN>
__device__ __forceinline__ void TileOrigin(int M, int N, int* m0, int* n0) {
  int tile_m, tile_n;
  SwizzleTile<8>(blockIdx.x, (M + kBM - 1) / kBM, (N + kBN - 1) / kBN, &tile_m, &tile_n);
  *m0 = tile_m * kBM;
  *n0 = tile_n * kBN;
}

// Where a block of a wgmma square kernel works: its dynamic shared memory from the first
// 1024-byte boundary (the swizzled atoms take their pattern from address bits 7-9; the
// kernels ask for 1 KiB extra) and that memory's shared-space address (for the
// descriptors); its output tile (TileOrigin) and the number of kBK steps of K.
struct WgmmaBlock {
  unsigned char* smem;
  uint32_t base;
  int m0, n0, num_k;
};
template <int kBM, int kBN, int kBK>
__device__ __forceinline__ WgmmaBlock WgmmaBlockOf(unsigned char* smem_raw, int M, int N, int K) {
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  WgmmaBlock b;
  b.base = (raw + 1023u) & ~1023u;
  b.smem = smem_raw + (b.base - raw);
  TileOrigin<kBM, kBN>(M, N, &b.m0, &b.n0);
  b.num_k = (K + kBK - 1) / kBK;
  return b;
}

// Stores (v0, v1) at C[row][col] and C[row][col + 1] of an N-column C, for col < N: one
// float2 when `pairs` (N even: col is even, so col + 1 < N and the address is 8-byte
// aligned), else one or two floats.
__device__ __forceinline__ void StorePair(float* C, int N, int row, int col, bool pairs,
                                          float v0, float v1) {
  float* out = C + int64_t(row) * N + col;
  if (pairs) {
    *reinterpret_cast<float2*>(out) = make_float2(v0, v1);
  } else {
    out[0] = v0;
    if (col + 1 < N) out[1] = v1;
  }
}

// The FP32 scale of an NVFP4 product's epilogue: the tensor scales, and 2^7 per NVFP4
// operand to undo the decode's scaling (exact: powers of two). fp16_a: A is dense FP16.
inline float Nvfp4OutScale(bool fp16_a, const DeviceQuantizedWeight& a,
                           const DeviceQuantizedWeight& b) {
  return fp16_a ? b.tensor_scale * 128.0f : a.tensor_scale * b.tensor_scale * 16384.0f;
}

// Launches `kernel` on `stream` with one block of `threads` per bm x bn tile of an m x n
// C and `smem` bytes of dynamic shared memory (raised once per device through
// `configured`), passing `args`. FAILED_PRECONDITION past 2^31 - 1 tiles; INTERNAL for
// CUDA errors.
template <typename... Params, typename... Args>
absl::Status LaunchOverTiles(void (*kernel)(Params...), int64_t m, int64_t n, int bm, int bn,
                             int threads, int smem, std::atomic<uint64_t>* configured,
                             cudaStream_t stream, Args... args) {
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), smem, configured));
  const int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
  if (tiles > 0x7FFFFFFF) return absl::FailedPreconditionError("too many output tiles");
  kernel<<<static_cast<unsigned>(tiles), threads, smem, stream>>>(args...);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// An NVFP4 square kernel (mma.sync or wgmma: one signature) over C's tiles; fp16_a: A is
// dense FP16 at a_fp16 instead of the NVFP4 `a`.
template <typename... Params>
absl::Status LaunchNvfp4OverTiles(void (*kernel)(Params...), int bm, int bn, int threads,
                                  int smem, std::atomic<uint64_t>* configured, bool fp16_a,
                                  const DeviceQuantizedWeight& a, const void* a_fp16, int64_t m,
                                  const DeviceQuantizedWeight& b, float* c, cudaStream_t stream) {
  return LaunchOverTiles(kernel, m, b.n, bm, bn, threads, smem, configured, stream,
                         static_cast<const uint8_t*>(a.data), static_cast<const uint8_t*>(a.scales),
                         static_cast<const __half*>(a_fp16), static_cast<const uint8_t*>(b.data),
                         static_cast<const uint8_t*>(b.scales), static_cast<int>(m),
                         static_cast<int>(b.n), static_cast<int>(b.k),
                         Nvfp4OutScale(fp16_a, a, b), c);
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_SQUARE_TILES_CUH_
