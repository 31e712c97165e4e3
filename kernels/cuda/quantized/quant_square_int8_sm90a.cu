// INT8 x INT8 GEMM with Hopper's warpgroup MMA (wgmma, sm_90a only; quant_square.h).
//
// Why: mma.sync s8 (quant_square_int8.cu) tops out at 40% of cuBLAS on the H200
// (docs/KERNELS.md): every operand passes through ldmatrix and the register file, and the
// MMAs are issued synchronously. wgmma reads both operands from shared memory itself and
// runs asynchronously to the warps.
// How: block 128x256x128 with two warpgroups (256 threads), each owning 64 rows x 256
// columns (m64n256k32, 128 int32 accumulators per thread); operands are copied by all
// threads with cp.async (zero-filled past the edges) into a 4-stage ring laid out in the
// 128-byte swizzle wgmma's descriptors expect (8-row atoms of 128-byte rows, 16-byte
// chunk c of row r at c ^ (r % 8)). One barrier per K step; the MMAs of step k run
// while the copies for k+2 are issued, and a stage is refilled only after the wgmma
// that read it has retired (wait_group 1). Epilogue as the mma.sync kernel: float(acc)
// * sa * sb straight from the accumulators.
// What it buys: 66% of cuBLAS INT8 at 4096^3 on the H200 (docs/KERNELS.md).
// Built only for sm_90a (kernels/cuda/CMakeLists.txt); quant_square.cc calls it only on
// compute capability 9.0.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/square_tiles.cuh"
#include "kernels/cuda/common/wgmma_sm90a.cuh"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 128, kStages = 4, kThreads = 256;
constexpr int kRowBytes = kBK;  // one 128-byte swizzle row per tile row
constexpr int kStageA = kBM * kRowBytes, kStageB = kBN * kRowBytes;
constexpr int kStageBytes = kStageA + kStageB;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align to 1024
static_assert(kSmemBytes <= 227 * 1024, "one block per SM must fit");
static_assert(kStages >= 3, "a stage is refilled two steps after its wgmma was issued");

__global__ void __launch_bounds__(kThreads, 1)
    Int8WgmmaKernel(const int8_t* __restrict__ A, const float* __restrict__ sa,
                    const int8_t* __restrict__ B, const float* __restrict__ sb, int M, int N,
                    int K, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const WgmmaBlock block = WgmmaBlockOf<kBM, kBN, kBK>(smem_raw, M, N, K);
  unsigned char* smem = block.smem;
  const uint32_t base = block.base;
  const int m0 = block.m0, n0 = block.n0, num_k = block.num_k, tid = threadIdx.x, wg = tid / 128;

  auto load_stage = [&](int slot, int k0) {
    unsigned char* sA = smem + slot * kStageBytes;
    unsigned char* sB = sA + kStageA;
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreads; ++i) {
      const int ci = tid + i * kThreads, r = ci / 8, c = ci % 8;
      const bool ok = m0 + r < M && k0 + c * 16 < K;  // K % 16 == 0: chunks are whole
      CpAsync16(sA + SwizzledChunk(r, c),
                ok ? A + int64_t(m0 + r) * K + k0 + c * 16 : A, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int ci = tid + i * kThreads, r = ci / 8, c = ci % 8;
      const bool ok = n0 + r < N && k0 + c * 16 < K;
      CpAsync16(sB + SwizzledChunk(r, c),
                ok ? B + int64_t(n0 + r) * K + k0 + c * 16 : B, ok ? 16 : 0);
    }
  };

  int acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0;

#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < num_k) load_stage(s, s * kBK);
    CpAsyncCommit();
  }
  for (int kt = 0; kt < num_k; ++kt) {
    CpAsyncWait<kStages - 3>();
    FenceProxyAsync();  // cp.async wrote through the generic proxy, wgmma reads the async one
    __syncthreads();  // step kt landed for everyone; step kt-2's wgmma retired everywhere
    const int next = kt + kStages - 2;
    if (next < num_k) load_stage(next % kStages, next * kBK);
    CpAsyncCommit();

    const uint32_t stage = base + (kt % kStages) * kStageBytes;
    const uint64_t desc_a = SmemDesc(stage + wg * 64 * kRowBytes);
    const uint64_t desc_b = SmemDesc(stage + kStageA);
    FenceAccumulators(acc);
    WgmmaFence();
#pragma unroll
    for (int s = 0; s < kBK / 32; ++s) {
      // +32 bytes along K inside the swizzled row: the hardware applies the XOR.
      WgmmaS8M64N256K32(acc, desc_a + 2 * s, desc_b + 2 * s);
    }
    WgmmaCommit();
    WgmmaWait<1>();
    FenceAccumulators(acc);
  }
  WgmmaWait<0>();
  FenceAccumulators(acc);

  // Accumulator layout (per warpgroup, m64nN): warp w holds rows 16w..16w+15; lane
  // (g = lane/4, q = lane%4) holds acc[4j..4j+3] = (g, 8j+2q), (g, 8j+2q+1), (g+8, 8j+2q),
  // (g+8, 8j+2q+1).
  const int w = (tid % 128) / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int row0 = m0 + wg * 64 + w * 16 + g, row1 = row0 + 8;
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
  static std::atomic<uint64_t> configured{0};
  return LaunchOverTiles(&Int8WgmmaKernel, a.n, b.n, kBM, kBN, kThreads, kSmemBytes,
                         &configured, stream, static_cast<const int8_t*>(a.data),
                         static_cast<const float*>(a.scales), static_cast<const int8_t*>(b.data),
                         static_cast<const float*>(b.scales), static_cast<int>(a.n),
                         static_cast<int>(b.n), static_cast<int>(a.k), c);
}

}  // namespace gemmd::gpu::internal
