// The swap-AB skinny kernels for NVFP4 and INT8 weights in the swap-AB layouts
// (kernels/quant_prepack.h): C^T = W * A^T with the weight as the MMA's A operand (16
// weight rows a warp) and the activations as its B, so the weight fills the MMA's wide side
// and one to 64 tokens its narrow one. Each lane's share of a super-tile (NVFP4: 16 code
// bytes and 8 scale bytes; INT8: 32 value bytes) decodes in registers into its A fragments
// of four m16n8k16 steps, exactly (quant_skinny_device.cuh's decodes). Two kernels:
// - wgmma (compute capability 9.0, builds with sm_90a): a producer warp streams the
//   super-tiles and a TMA box of activations into a shared-memory ring; consumer
//   warpgroups decode and issue m64nNk16 wgmmas reading the activations from shared
//   memory; K split over a cluster where the blocks would not fill the GPU.
// - mma.sync (any other GPU): each warp streams super-tiles into registers and loads its
//   tokens' activation words itself; a block's warps split K.
// Both add their partial sums in a fixed order (no atomics: the same bits whatever else
// runs). Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemmd::gpu {

inline constexpr int64_t kSwapAbMaxM = 64;  // mma.sync's rows of A; wgmma's up to 64 ...
inline constexpr int64_t kSwapAbWgmmaMaxM = int64_t{65535} * 64;  // ... and past 64, these

enum class SwapAbPath {
  kAuto,  // wgmma where it runs, else mma.sync (per shape once measured: docs/KERNELS.md)
  kMmaSync,
  kWgmma,  // FAILED_PRECONDITION where it does not run
};

// OK when the kernel of `path` (kAuto as kMmaSync) takes these operands (either format):
// 1 <= m <= kSwapAbMaxM (wgmma: kSwapAbWgmmaMaxM), an [n, k] weight with the swap-AB
// layout (n % 16 == 0, k % 64 == 0), A and the packed weight 16-byte aligned, n and k
// below 2^30; else INVALID_ARGUMENT saying which. Pointers are not read.
absl::Status SwapAbRuns(const void* a, int64_t m, const void* packed, int64_t n, int64_t k,
                        SwapAbPath path = SwapAbPath::kMmaSync);

// Knobs gemm-bench and the tests sweep; the defaults are the measured choices. Past 64
// rows of A the wgmma kernel reads only the square_* knobs and warpgroups.
struct SwapAbOptions {
  SwapAbPath path = SwapAbPath::kAuto;
  int l2_ahead = 0;  // mma.sync: each warp also asks L2 for its super-tile this many turns on
  int rows = 0;      // wgmma: weight rows a block, 128 or 256 (0: chosen)
  int splits = 0;    // wgmma: K split over a cluster of 1, 2, 4 or 8 blocks (0: chosen)
  int k_tiles_per_stage = 0;  // wgmma: K tiles of 64 a pipeline stage, 1 or 4 (0: chosen)
  int warpgroups = 0;         // wgmma: consumer warpgroups a block, 2 or 4 (4: 256 rows; 0: 2)
                              // (past 64 rows: 2)
  int square_waits = 0;       // wgmma past 64 rows: waits a K tile, 1 or 2 (0: chosen)
  // wgmma past 64 rows: tokens a block, 128 (a band of 256 weight rows) or 256 (half a
  // band, two consumer warpgroups; 0: chosen). FP16 A past 8192 of K takes 64 whatever.
  int square_tokens = 0;
  // wgmma past 64 rows: 1, a block for each band block x token block; 2, persistent blocks
  // (one an SM) taking those in turn, the next one's stages loading during the epilogue
  // (0: chosen, 2 where an SM takes few of them).
  int square_grid = 0;
  int square_blocks = 0;  // persistent: at most this many blocks (0: one an SM; tests use few)
  // wgmma past 64 rows: 1, C stored from the registers; 2, staged in shared memory and
  // stored by TMA, the consumers going on while it drains (one wait a K tile only; 0:
  // chosen, as square_grid).
  int square_store = 0;
  // wgmma up to 64 rows: the rows of the layout's bands, 256 (0: as kernels/quant_prepack.h
  // lays them out) or 128 (each 128-row slab prepacked alone, with 128 rows a block; the
  // store keeps 256): a sweep of the copies a stage takes (gemm-bench --swapab-band=128).
  int band_rows = 0;
};

// The path `options.path` resolves to on the current device; FAILED_PRECONDITION for
// kWgmma where it does not run, INTERNAL for CUDA errors.
absl::StatusOr<SwapAbPath> ResolveSwapAbPath(SwapAbPath path);
// "swapab_nvfp4_wgmma", "swapab_int8_mma16816", ...
std::string SwapAbKernelName(bool int8, SwapAbPath resolved);
// Whether this build has the wgmma kernel (sm_90a).
bool SwapAbWgmmaBuilt();

// Enqueues C[m, n] (FP32, row-major) = A[m, k] (FP16, row-major) * dequant(W)^T, W [n, k]
// NVFP4 in the swap-AB layout with tensor scale `tensor_scale`, on `stream`; all device
// pointers. SwapAbRuns's errors, INVALID_ARGUMENT for knobs out of range, or INTERNAL for
// a CUDA error.
absl::Status LaunchSwapAbNvfp4(const void* a, int64_t m, const void* packed, float tensor_scale,
                               int64_t n, int64_t k, float* c, cudaStream_t stream,
                               const SwapAbOptions& options = {});

// The same with A NVFP4 too (codes [m, k/2] and E4M3 block scales [m, k/16], 16-byte
// aligned, tensor scale a_tensor_scale): wgmma only, any m up to kSwapAbWgmmaMaxM. A is
// first expanded to FP16 in `a_half` (Nvfp4HalfBytes(m, k) of device memory, 16-byte
// aligned; nvfp4_expand.h) and the FP16 A kernels read it (a kernel that decoded A in its
// producer warpgroup ran at 0.6 of their rate: docs/KERNELS.md). FAILED_PRECONDITION where
// wgmma does not run; SwapAbRuns's errors; INVALID_ARGUMENT without a_half.
absl::Status LaunchSwapAbNvfp4xNvfp4(const void* a_codes, const void* a_scales,
                                     float a_tensor_scale, int64_t m, const void* packed,
                                     float tensor_scale, int64_t n, int64_t k, float* c,
                                     void* a_half, cudaStream_t stream,
                                     const SwapAbOptions& options = {});

// The same for an INT8 weight in its swap-AB layout (values, then the FP32 row scales).
absl::Status LaunchSwapAbInt8(const void* a, int64_t m, const void* packed, int64_t n, int64_t k,
                              float* c, cudaStream_t stream, const SwapAbOptions& options = {});

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_H_
