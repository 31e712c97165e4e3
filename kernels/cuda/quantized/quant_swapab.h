// The swap-AB skinny kernel for NVFP4 and INT8 weights in the swap-AB layouts
// (kernels/quant_prepack.h):
// C^T = W * A^T with the weight as mma.sync's A operand (16 weight rows a tile) and the
// activations as its B (8 tokens a tile), so the weight fills the MMA's wide side and one
// to 64 tokens its narrow one. Each warp streams super-tiles (NVFP4: 576 bytes, one 16-byte
// and one 2-byte load a lane; INT8: 1024 bytes, two 16-byte loads), decodes them in
// registers (exact, as quant_skinny_device.cuh) and
// multiplies them with its tokens' activations, 16 contiguous halves a lane and super-tile;
// a block's warps split K and add their sums in a fixed order (no atomics: the same bits
// whatever else runs). Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemmd::gpu {

inline constexpr int64_t kSwapAbMaxM = 64;

// OK when the kernel takes these operands (either format): 1 <= m <= kSwapAbMaxM, an [n, k]
// weight with the swap-AB layout (n % 16 == 0, k % 64 == 0), A and the packed weight
// 16-byte aligned, n and k below 2^30; else INVALID_ARGUMENT saying which. Pointers are
// not read.
absl::Status SwapAbRuns(const void* a, int64_t m, const void* packed, int64_t n, int64_t k);

// Enqueues C[m, n] (FP32, row-major) = A[m, k] (FP16, row-major) * dequant(W)^T, W [n, k]
// NVFP4 in the swap-AB layout with tensor scale `tensor_scale`, on `stream`; all device
// pointers. l2_ahead > 0 (gemm-bench sweeps): each warp also asks L2 for its super-tile
// that many turns ahead. SwapAbRuns's errors, or INTERNAL for a CUDA error.
absl::Status LaunchSwapAbNvfp4(const void* a, int64_t m, const void* packed, float tensor_scale,
                               int64_t n, int64_t k, float* c, cudaStream_t stream,
                               int l2_ahead = 0);

// The same for an INT8 weight in its swap-AB layout (values, then the FP32 row scales).
// Written 2026-12-07, not yet run on a GPU.
absl::Status LaunchSwapAbInt8(const void* a, int64_t m, const void* packed, int64_t n, int64_t k,
                              float* c, cudaStream_t stream, int l2_ahead = 0);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_H_
