// NVFP4 GEMM on the FP16 tensor cores (quant_square.h): A NVFP4 or FP16, B NVFP4.
//
// Hopper has no FP4 MMA, so the block copies the packed operands (E2M1 codes, two per
// byte, and their E4M3 scale bytes: 0.5625 bytes per value instead of FP16's 2) into
// shared memory with a 4-stage cp.async pipeline, decodes each value exactly once into
// a double-buffered FP16 tile, and runs mma.sync m16n8k16 (FP32 accumulation) from it
// with ldmatrix. Tile, warps and padding as hgemm_wmma.cu's 128x128x32 (4 warps of
// 64x64, two blocks per SM), with BK = 64 so one barrier covers twice the MMAs. The
// decode of step k+1 is interleaved with the MMAs of step k (independent instructions
// for the schedulers), one barrier per step. NVFP4 x NVFP4 / FP16 x NVFP4 reach 75% / 92%
// of hgemm_wmma at 4096^3 on the H200 (docs/KERNELS.md); compute capability 9.0 runs the
// wgmma kernels instead (quant_square_nvfp4_sm90a.cu), this one serves sm_80 and builds
// without sm_90a.
//
// Decoding (nvfp4_decode.cuh) is exact and table-free, about 2.5 instructions per value;
// with both operands NVFP4 the values of a 32-bit word are paired (j, j+4) rather than
// (2j, 2j+1), which saves one instruction per pair (A and B are permuted alike along K).
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

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64, kThreads = 128, kWarpsN = 2;
constexpr int kWM = 64, kWN = 64, kFM = kWM / 16, kFN = kWN / 8;
constexpr int kLdD = kBK + 8;          // halves per FP16 row in shared memory (16 B pad)
constexpr int kLdDBytes = kLdD * 2;    // 144: 8 rows of an ldmatrix phase hit distinct banks
constexpr int kCodeBytes = nvfp4::kCodeBytes, kScaleSlot = nvfp4::kScaleSlot;
static_assert(kBK == nvfp4::kStepK, "one K step is one nvfp4::LoadStep");

// Shared-memory layout (bytes). Per stage: A (codes + scales, or FP16 rows), then B's
// codes + scales; after the stages, two decoded buffers of [A FP16 rows,] B FP16 rows.
template <bool kFp16A>
struct Nvfp4Layout {
  static constexpr int kStages = kFp16A ? 3 : 4;  // FP16 A stages are 3.6x bigger
  static constexpr int kACodes = kBM * kCodeBytes;
  static constexpr int kStageA = kFp16A ? kBM * kLdDBytes : kACodes + kBM * kScaleSlot;
  static constexpr int kBCodes = kBN * kCodeBytes;
  static constexpr int kStageBytes = kStageA + kBCodes + kBN * kScaleSlot;
  static constexpr int kDecA = kFp16A ? 0 : kBM * kLdDBytes;
  static constexpr int kDecBytes = kDecA + kBN * kLdDBytes;
  static constexpr int kDecoded = kStages * kStageBytes;
  static constexpr int kSmemBytes = kDecoded + 2 * kDecBytes;
  static constexpr int kUnits = kFp16A ? 2 : 4;  // decode units (32 values x 128) per step
  static_assert(kSmemBytes <= 113 * 1024, "two blocks per SM must fit in 227 KB");
};

template <bool kFp16A>
__global__ void __launch_bounds__(kThreads, 2)
    Nvfp4SquareKernel(const uint8_t* __restrict__ a_codes, const uint8_t* __restrict__ a_scales,
                      const __half* __restrict__ a16, const uint8_t* __restrict__ b_codes,
                      const uint8_t* __restrict__ b_scales, int M, int N, int K,
                      float out_scale, float* __restrict__ C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // cp.async and ldmatrix need sm_80
#else
  using L = Nvfp4Layout<kFp16A>;
  constexpr int kStages = L::kStages;
  constexpr bool kPermute = !kFp16A;  // FP16 A arrives in K order
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int m0, n0;
  TileOrigin<kBM, kBN>(M, N, &m0, &n0);
  const int num_k = (K + kBK - 1) / kBK;

  auto load_stage = [&](int stage, int k0) {
    unsigned char* st = smem + stage * L::kStageBytes;
    if (kFp16A) {
#pragma unroll
      for (int i = 0; i < kBM * kBK / 8 / kThreads; ++i) {
        const int c = tid + i * kThreads, r = c / (kBK / 8), q = (c % (kBK / 8)) * 8;
        const bool ok = m0 + r < M && k0 + q < K;
        CpAsync16(st + r * kLdDBytes + q * 2, ok ? a16 + int64_t(m0 + r) * K + k0 + q : a16,
                  ok ? 16 : 0);
      }
    } else {
      nvfp4::LoadStep<kBM, kThreads>(st, st + L::kACodes, a_codes, a_scales, m0, M, K, k0, tid);
    }
    nvfp4::LoadStep<kBN, kThreads>(st + L::kStageA, st + L::kStageA + L::kBCodes, b_codes,
                                   b_scales, n0, N, K, k0, tid);
  };
  // Unit u of a step: operand A for u < 2 (both NVFP4), else B; 128 threads x 2 halves.
  auto decode_unit = [&](int stage, int buf, int u) {
    const unsigned char* st = smem + stage * L::kStageBytes;
    unsigned char* dec = smem + L::kDecoded + buf * L::kDecBytes;
    const bool is_a = !kFp16A && u < 2;
    const int c = tid + (u % 2) * kThreads, r = c / 2, half = c % 2;
    uint4 v[4];
    if (is_a) {
      nvfp4::DecodeHalfRow<kPermute>(st, st + L::kACodes, r, half, nvfp4::ScaleShift(m0 + r, K),
                                     v);
    } else {
      nvfp4::DecodeHalfRow<kPermute>(st + L::kStageA, st + L::kStageA + L::kBCodes, r, half,
                                     nvfp4::ScaleShift(n0 + r, K), v);
    }
    uint4* d = reinterpret_cast<uint4*>(dec + (is_a ? 0 : L::kDecA) + r * kLdDBytes + half * 64);
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] = v[i];
  };

  const int wm0 = (warp / kWarpsN) * kWM, wn0 = (warp % kWarpsN) * kWN;
  // ldmatrix row addresses (mma_sm80.cuh): A (rows 0-7 | 8-15) x (k 0-7 | 8-15); B (n 0-7,
  // k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15): b0/b1 of two n8 tiles.
  const int a_off = (wm0 + lane % 16) * kLdDBytes + (lane / 16) * 16;
  const int b_off = (wn0 + lane % 8 + (lane / 16) * 8) * kLdDBytes + ((lane / 8) % 2) * 16;

  float acc[kFM][kFN][4];
#pragma unroll
  for (int i = 0; i < kFM; ++i)
#pragma unroll
    for (int j = 0; j < kFN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k) load_stage(s, s * kBK);
    CpAsyncCommit();
  }
  CpAsyncWait<kStages - 2>();
  __syncthreads();
  if (num_k > 0) {
#pragma unroll
    for (int u = 0; u < L::kUnits; ++u) decode_unit(0, 0, u);
  }

  for (int kt = 0; kt < num_k; ++kt) {
    CpAsyncWait<kStages - 3>();
    __syncthreads();  // step kt decoded, step kt+1's bytes landed, buffer (kt+1)%2 free
    const int next = kt + kStages - 1;
    if (next < num_k) load_stage(next % kStages, next * kBK);
    CpAsyncCommit();

    const bool decode_next = kt + 1 < num_k;
    const unsigned char* dec = smem + L::kDecoded + (kt % 2) * L::kDecBytes;
    const unsigned char* tA = kFp16A ? smem + (kt % kStages) * L::kStageBytes : dec;
    const unsigned char* tB = dec + L::kDecA;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      constexpr int kEvery = (kBK / 16) / L::kUnits;
      if (decode_next && kk % kEvery == 0) {
        decode_unit((kt + 1) % kStages, (kt + 1) % 2, kk / kEvery);
      }
      uint32_t af[kFM][4], bf[kFN / 2][4];
#pragma unroll
      for (int i = 0; i < kFM; ++i) Ldmatrix4(af[i], tA + a_off + i * 16 * kLdDBytes + kk * 32);
#pragma unroll
      for (int j = 0; j < kFN / 2; ++j) {
        Ldmatrix4(bf[j], tB + b_off + j * 16 * kLdDBytes + kk * 32);
      }
#pragma unroll
      for (int i = 0; i < kFM; ++i)
#pragma unroll
        for (int j = 0; j < kFN; ++j)
          MmaF16(acc[i][j], af[i], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
    }
  }
  CpAsyncWait<0>();

  // Epilogue straight from the accumulators (lane g = lane/4, t = lane%4 holds rows g,
  // g+8 and columns 2t, 2t+1 of each m16n8 tile), times the tensor scales and 2^7 per
  // NVFP4 operand.
  const int g = lane / 4, t = lane % 4;
  const bool pairs = N % 2 == 0;
#pragma unroll
  for (int i = 0; i < kFM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm0 + i * 16 + h * 8 + g;
      if (row >= M) continue;
#pragma unroll
      for (int j = 0; j < kFN; ++j) {
        const int col = n0 + wn0 + j * 8 + 2 * t;
        if (col >= N) continue;
        StorePair(C, N, row, col, pairs, acc[i][j][2 * h] * out_scale,
                  acc[i][j][2 * h + 1] * out_scale);
      }
    }
  }
#endif
}

template <bool kFp16A>
absl::Status LaunchLayout(const DeviceQuantizedWeight& a, const void* a_fp16, int64_t m,
                          const DeviceQuantizedWeight& b, float* c, cudaStream_t stream) {
  static std::atomic<uint64_t> configured{0};
  return LaunchNvfp4OverTiles(&Nvfp4SquareKernel<kFp16A>, kBM, kBN, kThreads, Nvfp4Layout<kFp16A>::kSmemBytes,
                              &configured, kFp16A, a, a_fp16, m, b, c, stream);
}

}  // namespace

absl::Status LaunchNvfp4SquareMma(const DeviceQuantizedWeight& a, const void* a_fp16, int64_t m,
                                  const DeviceQuantizedWeight& b, float* c, cudaStream_t stream) {
  return a_fp16 != nullptr ? LaunchLayout<true>(a, a_fp16, m, b, c, stream)
                           : LaunchLayout<false>(a, nullptr, m, b, c, stream);
}

}  // namespace gemmd::gpu::internal
