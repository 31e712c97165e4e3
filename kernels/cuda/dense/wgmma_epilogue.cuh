// The epilogue of the dense wgmma tiles (hgemm_wgmma*_sm90a.cu): one warpgroup's 64x256
// FP32 accumulators to C, with alpha and beta * C_in, straight from the registers.
// .cu files compiled for sm_90a only.
#ifndef GEMMD_KERNELS_CUDA_DENSE_WGMMA_EPILOGUE_CUH_
#define GEMMD_KERNELS_CUDA_DENSE_WGMMA_EPILOGUE_CUH_

#include <cstdint>

#include "kernels/cuda/dense/block_tile.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {

// `rows`: the warpgroup's first row in the block tile; `thread`: its index in the
// warpgroup (0-127). Accumulator layout of m64nN: warp w holds rows 16w..16w+15; lane
// (g = lane/4, q = lane%4) holds acc[4j..4j+3] = (g, 8j+2q), (g, 8j+2q+1), (g+8, 8j+2q),
// (g+8, 8j+2q+1).
__device__ __forceinline__ void StoreWarpgroupTile(const TileArgs& args, const BlockTile& tile,
                                                   int rows, int thread, const float (&acc)[128]) {
  const int M = args.m, N = args.n;
  float* C = args.c + tile.item * args.stride_c + tile.split * args.split_stride_c;
  const float* C_in = args.beta != 0.0f ? args.c_in + tile.item * args.stride_c_in : nullptr;
  const float alpha = args.alpha, beta = args.beta;
  const int64_t ldc = args.ldc;
  // float2 stores need an even column count, an even ldc and an 8-byte aligned C.
  const bool pairs =
      args.c_vec || (N % 2 == 0 && ldc % 2 == 0 && (reinterpret_cast<uintptr_t>(C) & 7) == 0 &&
                     (C_in == nullptr || (reinterpret_cast<uintptr_t>(C_in) & 7) == 0));
  const int w = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
  const int row0 = tile.m0 + rows + w * 16 + g;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int col = tile.n0 + j * 8 + 2 * q;
    if (col >= N) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row >= M) continue;
      const int64_t off = int64_t(row) * ldc + col;
      float v0 = alpha * acc[4 * j + 2 * h], v1 = alpha * acc[4 * j + 2 * h + 1];
      if (pairs) {
        if (C_in != nullptr) {
          const float2 old = *reinterpret_cast<const float2*>(C_in + off);
          v0 = fmaf(beta, old.x, v0);
          v1 = fmaf(beta, old.y, v1);
        }
        *reinterpret_cast<float2*>(C + off) = make_float2(v0, v1);
      } else {
        if (C_in != nullptr) v0 = fmaf(beta, C_in[off], v0);
        C[off] = v0;
        if (col + 1 < N) {
          if (C_in != nullptr) v1 = fmaf(beta, C_in[off + 1], v1);
          C[off + 1] = v1;
        }
      }
    }
  }
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_DENSE_WGMMA_EPILOGUE_CUH_
