// NVFP4 GEMM with Hopper's warpgroup MMA (wgmma, sm_90a only; quant_square.h): A NVFP4
// or FP16, B NVFP4, FP16 tensor cores with FP32 accumulation.
//
// Why: the mma.sync kernel (quant_square_nvfp4.cu) is capped by mma.sync itself, like
// hgemm_wmma; wgmma reads the decoded FP16 tiles straight from shared memory and runs
// asynchronously, so the decode of the next K step overlaps the tensor cores.
// How: block 128x256x64, two warpgroups (256 threads) of 64x256 (m64n256k16, 128 FP32
// accumulators per thread). All threads copy the packed codes and scales (and FP16 A) with
// cp.async into a 5-stage ring, three steps ahead; each step is decoded once
// (nvfp4_decode.cuh) into one of three FP16 buffers in the 128-byte swizzle wgmma's
// descriptors expect. Per step: one barrier, the wgmmas of step k issued, step k+1
// decoded while they run, then wait until step k-1's wgmmas retired (a decoded buffer is
// rewritten two steps after the wgmmas that read it were issued).
// What it buys: NVFP4 x NVFP4 at hgemm_wmma's FP16 rate (316 against 315 TFLOP/s at
// 4096^3 on the H200; docs/KERNELS.md has the measurements). Both operands NVFP4 it is
// bound by the decode and its shared-memory traffic (each step writes 48 KB of FP16 and
// wgmma reads 80 KB), not by the tensor cores (INT8 wgmma runs far faster).
// Built only for sm_90a (kernels/cuda/CMakeLists.txt); quant_square.cc calls it only on
// compute capability 9.0.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/quantized/nvfp4_decode.cuh"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/square_tiles.cuh"
#include "kernels/cuda/common/wgmma_sm90a.cuh"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = nvfp4::kStepK, kThreads = 256;
constexpr int kRowBytes = kBK * 2;  // one FP16 row of a step: one 128-byte swizzle row
static_assert(kRowBytes == 128, "the 128-byte swizzle holds one row of a step");

// Shared memory (bytes, from a 1024-aligned base): three decoded buffers ([A,] B FP16
// rows), then the stages: [A FP16 rows or A codes + scales], B codes + scales.
template <bool kFp16A>
struct Layout {
  static constexpr int kStages = 5;
  static constexpr int kDecA = kFp16A ? 0 : kBM * kRowBytes;
  static constexpr int kDecBytes = kDecA + kBN * kRowBytes;
  static constexpr int kStagesAt = 3 * kDecBytes;
  static constexpr int kACodes = kBM * nvfp4::kCodeBytes;
  static constexpr int kStageA = kFp16A ? kBM * kRowBytes : kACodes + kBM * nvfp4::kScaleSlot;
  static constexpr int kBCodes = kBN * nvfp4::kCodeBytes;
  static constexpr int kStageBytes = kStageA + kBCodes + kBN * nvfp4::kScaleSlot;
  static constexpr int kSmemBytes = kStagesAt + kStages * kStageBytes + 1024;  // + alignment
  static constexpr int kUnits = (kFp16A ? kBN : kBM + kBN) * 2 / kThreads;  // decode, per thread
  static_assert(kSmemBytes <= 227 * 1024, "one block per SM must fit");
  static_assert(kDecBytes % 1024 == 0 && kStageBytes % 1024 == 0, "tiles stay 1024-aligned");
  static_assert(kBM * 2 % kThreads == 0, "decode units are warp-uniform per operand");
};

template <bool kFp16A>
__global__ void __launch_bounds__(kThreads, 1)
    Nvfp4WgmmaKernel(const uint8_t* __restrict__ a_codes, const uint8_t* __restrict__ a_scales,
                     const __half* __restrict__ a16, const uint8_t* __restrict__ b_codes,
                     const uint8_t* __restrict__ b_scales, int M, int N, int K,
                     float out_scale, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<kFp16A>;
  constexpr int kStages = L::kStages;
  constexpr bool kPermute = !kFp16A;  // FP16 A arrives in K order
  extern __shared__ unsigned char smem_raw[];
  const WgmmaBlock block = WgmmaBlockOf<kBM, kBN, kBK>(smem_raw, M, N, K);
  unsigned char* smem = block.smem;
  const uint32_t base = block.base;
  const int m0 = block.m0, n0 = block.n0, num_k = block.num_k, tid = threadIdx.x, wg = tid / 128;

  auto stage_at = [&](int slot) { return L::kStagesAt + slot * L::kStageBytes; };
  auto load_stage = [&](int slot, int k0) {
    unsigned char* st = smem + stage_at(slot);
    if (kFp16A) {
#pragma unroll
      for (int i = 0; i < kBM * 8 / kThreads; ++i) {
        const int ci = tid + i * kThreads, r = ci / 8, c = ci % 8;
        const bool ok = m0 + r < M && k0 + c * 8 < K;  // K % 32 == 0: chunks are whole
        CpAsync16(st + SwizzledChunk(r, c), ok ? a16 + int64_t(m0 + r) * K + k0 + c * 8 : a16,
                  ok ? 16 : 0);
      }
    } else {
      nvfp4::LoadStep<kBM, kThreads>(st, st + L::kACodes, a_codes, a_scales, m0, M, K, k0, tid);
    }
    nvfp4::LoadStep<kBN, kThreads>(st + L::kStageA, st + L::kStageA + L::kBCodes, b_codes,
                                   b_scales, n0, N, K, k0, tid);
  };
  // Decodes step `slot` into buffer `buf`: unit u = tid + 256 i is half u % 2 of row u / 2
  // of A (the first 256 units, both NVFP4) or B.
  auto decode_step = [&](int slot, int buf) {
    const unsigned char* st = smem + stage_at(slot);
    unsigned char* dec = smem + buf * L::kDecBytes;
#pragma unroll
    for (int i = 0; i < L::kUnits; ++i) {
      const bool is_a = !kFp16A && i < kBM * 2 / kThreads;
      const int u = tid + i * kThreads - (kFp16A || is_a ? 0 : kBM * 2);
      const int r = u / 2, half = u % 2;
      uint4 v[4];
      if (is_a) {
        nvfp4::DecodeHalfRow<kPermute>(st, st + L::kACodes, r, half,
                                       nvfp4::ScaleShift(m0 + r, K), v);
      } else {
        nvfp4::DecodeHalfRow<kPermute>(st + L::kStageA, st + L::kStageA + L::kBCodes, r, half,
                                       nvfp4::ScaleShift(n0 + r, K), v);
      }
      unsigned char* rows = dec + (is_a ? 0 : L::kDecA);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        *reinterpret_cast<uint4*>(rows + SwizzledChunk(r, half * 4 + j)) = v[j];
      }
    }
    FenceProxyAsync();  // st.shared writes, read next by wgmma (async proxy)
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < num_k) load_stage(s, s * kBK);
    CpAsyncCommit();
  }
  CpAsyncWait<kStages - 3>();
  __syncthreads();
  if (num_k > 0) decode_step(0, 0);

  for (int kt = 0; kt < num_k; ++kt) {
    CpAsyncWait<kStages - 4>();
    FenceProxyAsync();  // FP16 A came by cp.async (generic proxy) and goes to wgmma
    __syncthreads();  // step kt decoded; step kt+1's bytes landed; step kt-2's wgmma retired
    const int next = kt + kStages - 2;
    if (next < num_k) load_stage(next % kStages, next * kBK);
    CpAsyncCommit();

    const uint32_t dec = base + (kt % 3) * L::kDecBytes;
    const uint32_t a_tile = kFp16A ? base + stage_at(kt % kStages) : dec;
    const uint64_t desc_a = SmemDesc(a_tile + wg * 64 * kRowBytes);
    const uint64_t desc_b = SmemDesc(dec + L::kDecA);
    FenceAccumulators(acc);
    WgmmaFence();
#pragma unroll
    for (int s = 0; s < kBK / 16; ++s) {
      WgmmaF16M64N256K16(acc, desc_a + 2 * s, desc_b + 2 * s);  // +32 bytes along K
    }
    WgmmaCommit();
    if (kt + 1 < num_k) decode_step((kt + 1) % kStages, (kt + 1) % 3);
    WgmmaWait<1>();
    FenceAccumulators(acc);
  }
  WgmmaWait<0>();
  FenceAccumulators(acc);

  // Accumulator layout (per warpgroup, m64nN): warp w holds rows 16w..16w+15; lane
  // (g = lane/4, q = lane%4) holds acc[4j..4j+3] = (g, 8j+2q), (g, 8j+2q+1), (g+8, 8j+2q),
  // (g+8, 8j+2q+1).
  const int w = (tid % 128) / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int row0 = m0 + wg * 64 + w * 16 + g;
  const bool pairs = N % 2 == 0;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const int col = n0 + j * 8 + 2 * q;
    if (col >= N) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row >= M) continue;
      StorePair(C, N, row, col, pairs, acc[4 * j + 2 * h] * out_scale,
                acc[4 * j + 2 * h + 1] * out_scale);
    }
  }
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

template <bool kFp16A>
absl::Status LaunchLayout(const DeviceQuantizedWeight& a, const void* a_fp16, int64_t m,
                          const DeviceQuantizedWeight& b, float* c, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};
  return LaunchNvfp4OverTiles(&Nvfp4WgmmaKernel<kFp16A>, kBM, kBN, kThreads, Layout<kFp16A>::kSmemBytes,
                              &configured, kFp16A, a, a_fp16, m, b, c, stream);
}

}  // namespace

absl::Status LaunchNvfp4SquareWgmma(const DeviceQuantizedWeight& a, const void* a_fp16,
                                    int64_t m, const DeviceQuantizedWeight& b, float* c,
                                    cudaStream_t stream) {
  return a_fp16 != nullptr ? LaunchLayout<true>(a, a_fp16, m, b, c, stream)
                           : LaunchLayout<false>(a, nullptr, m, b, c, stream);
}

}  // namespace gemmd::gpu::internal
