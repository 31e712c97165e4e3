// INT8 x INT8 GEMM with Hopper's warpgroup MMA (wgmma, sm_90a only; quant_square.h).
//
// Why: mma.sync s8 (quant_square_int8.cu) tops out at 40% of cuBLAS on the H200
// (docs/KERNELS.md): every operand passes through ldmatrix and the register file, and the
// MMAs are issued synchronously. wgmma reads both operands from shared memory itself and
// runs asynchronously to the warps.
// How: block 128x256x128 in three warpgroups (384 threads). The producer (one thread; its
// registers given to the others with setmaxnreg) asks the copy engine (TMA) for each K
// step's A and B boxes (tensor maps with the 128-byte swizzle the descriptors read, zeros
// past the edges) against a "full" mbarrier per stage of a 4-stage ring; the two consumer
// warpgroups, each owning 64 rows x 256 columns (m64n256k32, 128 int32 accumulators per
// thread), wait on it, run their wgmmas and release the previous step's stage on an
// "empty" mbarrier once its wgmmas retired. No block-wide barrier in the main loop.
// Epilogue as the mma.sync kernel: float(acc) * sa * sb straight from the accumulators.
// What it buys (H200, gemm-bench --quantized-square, cuBLAS 8I->32I in the same run):
// 71% of cuBLAS at 4096^3 and 92% at 8192^3; the previous version of this kernel, every
// thread issuing cp.async with a barrier per K step, reached 64-66% at 4096^3
// (docs/KERNELS.md).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/tma_sm90a.cuh"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/square_tiles.cuh"
#include "kernels/cuda/common/wgmma_sm90a.cuh"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 128, kStages = 4;
constexpr int kConsumers = 2, kThreads = 128 * (kConsumers + 1);
constexpr int kRowBytes = kBK;  // one 128-byte swizzle row per tile row
constexpr int kStageA = kBM * kRowBytes, kStageB = kBN * kRowBytes;
constexpr int kStageBytes = kStageA + kStageB;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + barriers, align
static_assert(kSmemBytes <= 227 * 1024, "one block per SM must fit");

__global__ void __launch_bounds__(kThreads, 1)
    Int8WgmmaKernel(const __grid_constant__ CUtensorMap map_a,
                    const __grid_constant__ CUtensorMap map_b, const float* __restrict__ sa,
                    const float* __restrict__ sb, int M, int N, int K, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const WgmmaBlock block = WgmmaBlockOf<kBM, kBN, kBK>(smem_raw, M, N, K);
  const uint32_t base = block.base;
  const uint32_t full = base + kStages * kStageBytes, empty = full + kStages * 8;
  const int m0 = block.m0, n0 = block.n0, num_k = block.num_k, wg = threadIdx.x / 128;
  if (threadIdx.x == 0) InitRingBarriers<kStages>(full, empty, kConsumers);
  __syncthreads();

  if (wg == 0) {  // the producer: one thread asks the copy engine for each K step
    SetMaxRegistersDown<40>();
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < num_k; ++kt) {
        const int s = kt % kStages;
        if (kt >= kStages) MbarWait(empty + s * 8, ((kt / kStages) + 1) & 1);
        const uint32_t stage = base + s * kStageBytes;
        MbarArriveExpectTx(full + s * 8, kStageBytes);
        TmaLoad3d(stage, &map_a, kt * kBK, m0, 0, full + s * 8);
        TmaLoad3d(stage + kStageA, &map_b, kt * kBK, n0, 0, full + s * 8);
      }
    }
    return;
  }

  SetMaxRegistersUp<232>();
  const int consumer = wg - 1, thread = threadIdx.x % 128;
  int acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0;
  for (int kt = 0; kt < num_k; ++kt) {
    const int s = kt % kStages;
    MbarWait(full + s * 8, (kt / kStages) & 1);
    const uint32_t stage = base + s * kStageBytes;
    const uint64_t desc_a = SmemDesc(stage + consumer * 64 * kRowBytes);
    const uint64_t desc_b = SmemDesc(stage + kStageA);
    FenceAccumulators(acc);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBK / 32; ++k) {
      // +32 bytes along K inside the swizzled row: the hardware applies the XOR.
      WgmmaS8M64N256K32(acc, desc_a + 2 * k, desc_b + 2 * k);
    }
    WgmmaCommit();
    WgmmaWait<1>();  // step kt - 1's wgmmas have retired: its stage can be refilled
    FenceAccumulators(acc);
    if (kt > 0 && thread == 0) MbarArrive(empty + ((kt - 1) % kStages) * 8);
  }
  WgmmaWait<0>();
  FenceAccumulators(acc);

  // Accumulator layout (per warpgroup, m64nN): warp w holds rows 16w..16w+15; lane
  // (g = lane/4, q = lane%4) holds acc[4j..4j+3] = (g, 8j+2q), (g, 8j+2q+1), (g+8, 8j+2q),
  // (g+8, 8j+2q+1).
  const int w = thread / 32, lane = thread % 32, g = lane / 4, q = lane % 4;
  const int row0 = m0 + consumer * 64 + w * 16 + g, row1 = row0 + 8;
  const float s0 = row0 < M ? sa[row0] : 0.0f, s1 = row1 < M ? sa[row1] : 0.0f;
  const bool pairs = N % 2 == 0;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int col = n0 + j * 8 + 2 * q;
    if (col >= N) continue;
    const float b0 = sb[col], b1 = col + 1 < N ? sb[col + 1] : 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h == 0 ? row0 : row1;
      if (row >= M) continue;
      const float s = h == 0 ? s0 : s1;
      StorePair(C, N, row, col, pairs, static_cast<float>(acc[4 * j + 2 * h]) * (s * b0),
                static_cast<float>(acc[4 * j + 2 * h + 1]) * (s * b1));
    }
  }
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

}  // namespace

absl::Status LaunchInt8SquareWgmma(const DeviceQuantizedWeight& a,
                                   const DeviceQuantizedWeight& b, float* c,
                                   cudaStream_t stream) {
  CUtensorMap map_a{}, map_b{};
  if (a.k > 0) {
    GEMMD_GPU_RETURN_IF_ERROR(MakeTensorMap3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.data,
                                              a.k, a.n, a.k, 0, 1, kBK, kBM));
    GEMMD_GPU_RETURN_IF_ERROR(MakeTensorMap3d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, b.data,
                                              b.k, b.n, b.k, 0, 1, kBK, kBN));
  }
  static std::atomic<uint64_t> configured{0};
  return LaunchOverTiles(&Int8WgmmaKernel, a.n, b.n, kBM, kBN, kThreads, kSmemBytes,
                         &configured, stream, map_a, map_b, static_cast<const float*>(a.scales),
                         static_cast<const float*>(b.scales), static_cast<int>(a.n),
                         static_cast<int>(b.n), static_cast<int>(a.k), c);
}

}  // namespace gemmd::gpu::internal
