// INT8 x INT8 GEMM on the tensor cores (quant_square.h): C = float(A_q B_q^T) * sa * sb.
//
// mma.sync m16n8k32 s8 (IMMA.16832: twice the operations per instruction and per byte of
// shared memory of FP16's m16n8k16), fed by ldmatrix from a 4-stage cp.async pipeline;
// block 128x128x64 bytes, 4 warps of 64x64 (128 int32 accumulators per thread, two
// blocks per SM), shared rows padded to 80 bytes so the 8 rows of every ldmatrix phase
// hit distinct banks; int32 accumulation is exact, the per-row scales are applied once
// in the epilogue. Layout and pipeline follow hgemm_wmma.cu, whose measurements chose
// them for mma.sync on the H200: 40% of cuBLAS INT8 at 4096^3 there (docs/KERNELS.md),
// which is why compute capability 9.0 runs the wgmma kernel instead
// (quant_square_int8_sm90a.cu); this one serves sm_80 and builds without sm_90a.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/mma_sm80.cuh"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/square_tiles.cuh"

namespace gemmd::gpu::internal {
namespace {

template <int kBM, int kBN, int kBK, int kWarpsM, int kWarpsN, int kStages>
struct Int8Tile {
  static constexpr int BM = kBM, BN = kBN, BK = kBK, Stages = kStages, WarpsN = kWarpsN;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int WM = kBM / kWarpsM, WN = kBN / kWarpsN;
  static constexpr int FM = WM / 16;  // m16 tiles per warp
  static constexpr int FN = WN / 8;   // n8 tiles per warp
  static constexpr int kLd = kBK + 16;  // bytes per shared row: 16 bytes of padding
  static constexpr int kStageBytes = (kBM + kBN) * kLd;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: whole m16 tiles, pairs of n8");
  static_assert(kBK % 32 == 0, "K step: whole k32 MMAs");
  static_assert(kStages >= 2, "the pipeline needs two stages");
  static_assert((kBM * kBK / 16) % kThreads == 0 && (kBN * kBK / 16) % kThreads == 0,
                "every thread copies the same number of 16-byte chunks");
  static_assert((kLd / 16) % 2 == 1, "an odd number of 16-byte units per row: no conflicts");
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 2)
    Int8SquareKernel(const int8_t* __restrict__ A, const float* __restrict__ sa,
                     const int8_t* __restrict__ B, const float* __restrict__ sb, int M, int N,
                     int K, float* __restrict__ C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // cp.async, ldmatrix and m16n8k32 need sm_80
#else
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, NT = Cfg::kThreads;
  constexpr int LD = Cfg::kLd, kStages = Cfg::Stages, FM = Cfg::FM, FN = Cfg::FN;
  constexpr int kChunksPerRow = BK / 16;
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int m0, n0;
  TileOrigin<BM, BN>(M, N, &m0, &n0);
  const int num_k = (K + BK - 1) / BK;

  auto load_stage = [&](int stage, int k0) {
    unsigned char* sA = smem + stage * Cfg::kStageBytes;
    unsigned char* sB = sA + BM * LD;
#pragma unroll
    for (int i = 0; i < BM * kChunksPerRow / NT; ++i) {
      const int c = tid + i * NT, r = c / kChunksPerRow, q = (c % kChunksPerRow) * 16;
      const bool ok = m0 + r < M && k0 + q < K;  // K % 16 == 0: chunks are whole
      CpAsync16(sA + r * LD + q, ok ? A + int64_t(m0 + r) * K + k0 + q : A, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < BN * kChunksPerRow / NT; ++i) {
      const int c = tid + i * NT, r = c / kChunksPerRow, q = (c % kChunksPerRow) * 16;
      const bool ok = n0 + r < N && k0 + q < K;
      CpAsync16(sB + r * LD + q, ok ? B + int64_t(n0 + r) * K + k0 + q : B, ok ? 16 : 0);
    }
  };

  const int wm0 = (warp / Cfg::WarpsN) * Cfg::WM, wn0 = (warp % Cfg::WarpsN) * Cfg::WN;
  // ldmatrix row addresses (bytes within a stage), see mma_sm80.cuh: A's four matrices
  // are (rows 0-7 | 8-15) x (k bytes 0-15 | 16-31); B's are (n 0-7, k 0-15), (n 0-7,
  // k 16-31), (n 8-15, k 0-15), (n 8-15, k 16-31): the b0/b1 pairs of two n8 tiles.
  const int a_off = (wm0 + lane % 16) * LD + (lane / 16) * 16;
  const int b_off = BM * LD + (wn0 + lane % 8 + (lane / 16) * 8) * LD + ((lane / 8) % 2) * 16;

  int acc[FM][FN][4];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k) load_stage(s, s * BK);
    CpAsyncCommit();
  }
  for (int kt = 0; kt < num_k; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage kt landed for everyone; stage kt-1 is free to refill
    const int next = kt + kStages - 1;
    if (next < num_k) load_stage(next % kStages, next * BK);
    CpAsyncCommit();

    const unsigned char* st = smem + (kt % kStages) * Cfg::kStageBytes;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 32) {
      uint32_t af[FM][4], bf[FN / 2][4];
#pragma unroll
      for (int i = 0; i < FM; ++i) Ldmatrix4(af[i], st + a_off + i * 16 * LD + kk);
#pragma unroll
      for (int j = 0; j < FN / 2; ++j) Ldmatrix4(bf[j], st + b_off + j * 16 * LD + kk);
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
          MmaS8(acc[i][j], af[i], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
    }
  }
  CpAsyncWait<0>();

  // Epilogue straight from the accumulators: lane (g = lane/4, t = lane%4) holds rows g
  // and g+8, columns 2t and 2t+1 of each m16n8 tile; 4 lanes write 32 contiguous bytes.
  const int g = lane / 4, t = lane % 4;
  float sbv[FN][2];
#pragma unroll
  for (int j = 0; j < FN; ++j) {
    const int col = n0 + wn0 + j * 8 + 2 * t;
    sbv[j][0] = col < N ? sb[col] : 0.0f;
    sbv[j][1] = col + 1 < N ? sb[col + 1] : 0.0f;
  }
  const bool pairs = N % 2 == 0;  // float2 stores stay 8-byte aligned
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wm0 + i * 16 + h * 8 + g;
      if (row >= M) continue;
      const float s = sa[row];
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        const int col = n0 + wn0 + j * 8 + 2 * t;
        if (col >= N) continue;
        StorePair(C, N, row, col, pairs, static_cast<float>(acc[i][j][2 * h]) * (s * sbv[j][0]),
                  static_cast<float>(acc[i][j][2 * h + 1]) * (s * sbv[j][1]));
      }
    }
  }
#endif
}

using Int8Cfg = Int8Tile<128, 128, 64, 2, 2, 4>;

}  // namespace

absl::Status LaunchInt8SquareMma(const DeviceQuantizedWeight& a, const DeviceQuantizedWeight& b,
                                 float* c, cudaStream_t stream) {
  using Cfg = Int8Cfg;
  static std::atomic<uint64_t> configured{0};
  return LaunchOverTiles(&Int8SquareKernel<Cfg>, a.n, b.n, Cfg::BM, Cfg::BN, Cfg::kThreads,
                         Cfg::kSmemBytes, &configured, stream, static_cast<const int8_t*>(a.data),
                         static_cast<const float*>(a.scales), static_cast<const int8_t*>(b.data),
                         static_cast<const float*>(b.scales), static_cast<int>(a.n),
                         static_cast<int>(b.n), static_cast<int>(a.k), c);
}

}  // namespace gemmd::gpu::internal
