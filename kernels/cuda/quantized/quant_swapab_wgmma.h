// The swap-AB kernel on Hopper's warpgroup MMA (quant_swapab_wgmma_sm90a.cu, built for sm_90a
// only; quant_swapab.cu calls it on compute capability 9.0). Host-only header; compiles
// with g++.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_WGMMA_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_WGMMA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/quantized/quant_swapab.h"

namespace gemmd::gpu::internal {

// C[m, n] = A[m, k] (FP16) * dequant(W)^T * out_scale for W [n, k] in its swap-AB layout
// (NVFP4, or INT8 with `int8`, whose row scales are applied too); the operands already
// checked (SwapAbRuns), 1 <= m <= 64. The options' wgmma knobs (quant_swapab.h): `rows`
// weight rows a block, 128 or 256; `splits` the K split over a cluster of 1, 2, 4 or 8
// blocks; `k_tiles_per_stage` 1 or 4; `warpgroups` 2 or 4 (4: 256 rows, one set of 64 a
// warpgroup, 4 K tiles a stage); `band_rows` 256 or 128 (with 128 rows a block); 0 for
// the chosen value. INVALID_ARGUMENT for other values, INTERNAL for CUDA errors.
absl::Status LaunchSwapAbWgmma(bool int8, const void* a, int64_t m, const void* packed,
                               float out_scale, int64_t n, int64_t k, float* c,
                               const SwapAbOptions& options, cudaStream_t stream);

// The same for more than 64 rows of A (quant_square_swapab_sm90a.cu): items of a band of
// 256 weight rows x 128 tokens, or half a band x 256 tokens (64 tokens past 8192 of K),
// m <= kSwapAbWgmmaMaxM (quant_swapab.h), K whole in each item, two consumer warpgroups.
// The options' knobs: `square_waits`, wgmma waits a K tile, 1 (both sets' wgmmas at once)
// or 2 (one set's, then the other's); `square_tokens`, 128 or 256 (one set a consumer);
// `square_grid`, a block an item or persistent blocks (`square_blocks` of them at most);
// `square_store`, C from the registers or by TMA;
// `warpgroups`, 2; 0 for the chosen value. INVALID_ARGUMENT for m or knobs out of range,
// INTERNAL for CUDA errors.
absl::Status LaunchSquareSwapAbWgmma(bool int8, const void* a, int64_t m, const void* packed,
                                     float out_scale, int64_t n, int64_t k, float* c,
                                     const SwapAbOptions& options, cudaStream_t stream);

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_WGMMA_H_
