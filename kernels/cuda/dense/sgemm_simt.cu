// FP32 SIMT GEMM (PRECISION_FP32): plain FP32 FMA, no TF32, no tensor cores.
//
// The optimisation: the register-blocked outer-product micro-kernel. A block computes
// a BM x BN tile of C; each warp a WM x WN sub-tile; each thread a TM x TN micro-tile
// held in registers, built as RM x RN chunks of 4x4 so that every shared-memory read
// is a float4 that the warp broadcasts (8 distinct float4 per warp: conflict-free).
// Per K step of BK, A (stored transposed in shared memory, As[k][m], so a column of A
// is a contiguous float4) and B are staged through two shared-memory buffers: the
// 16-byte global loads of slice k+1 go to registers during the FMAs of slice k and to
// the other buffer after them, one __syncthreads per K step. Each thread does TM*TN
// FMAs per (TM+TN)/4 shared loads, which is what makes this FMA-bound. Blocks are
// rasterised in groups of 8 tile rows for L2 reuse.
//
// The 128x128x8 variant (8x8 per thread) computes its loader's pointers and predicates
// once and splits the staging (A fetched at step 0 and stored half-way, B fetched
// half-way): no spills at the 128-register cap that keeps two blocks per SM. What it
// buys: 84% / 85% of cuBLAS SGEMM at 4096^3 / 8192^3 on the H200 (docs/KERNELS.md has
// the ladder and the variants that lost).
// The 64x64x8 and 16x128x16 variants serve small and skinny problems with split-K.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/dense/block_tile.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

template <int kBM, int kBN, int kBK, int kWarpsM, int kWarpsN, int kRM, int kRN,
          int kMinBlocks, bool kSplitStagingArg>
struct SimtTile {
  static constexpr int BM = kBM;
  static constexpr int BN = kBN;
  static constexpr int BK = kBK;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int WM = kBM / kWarpsM;  // warp tile
  static constexpr int WN = kBN / kWarpsN;
  static constexpr int RM = kRM;  // 4-row chunks per thread
  static constexpr int RN = kRN;  // 4-column chunks per thread
  static constexpr int TM = 4 * kRM;
  static constexpr int TN = 4 * kRN;
  static constexpr int TY = WM / TM;  // thread grid inside a warp
  static constexpr int TX = WN / TN;
  static constexpr int WarpsN = kWarpsN;
  static constexpr int MinBlocks = kMinBlocks;
  // true: fetch A at K step 0 and B half-way (halves the live staging registers; needs
  // enough FMAs per half step to cover a global load). false: fetch both at step 0.
  static constexpr bool kSplitStaging = kSplitStagingArg;
  // Padding keeps float4 alignment and spreads the transposed (As[k][m]) stores over
  // all 32 banks.
  static constexpr int kPad = 4;

  static_assert(kBM % kWarpsM == 0 && kBN % kWarpsN == 0, "block tile must split into warps");
  static_assert(WM % TM == 0 && WN % TN == 0, "warp tile must split into micro-tiles");
  static_assert(TY * TX == 32, "a warp tile must hold exactly 32 micro-tiles");
  static_assert(kBK % 4 == 0, "K step must be a multiple of the float4 load");
};

// Stages one operand's BK-deep slice of the block tile from global memory into registers
// (Load) and then into shared memory, stored [k][x] (Store). "K-contiguous" operands (A
// not transposed, B transposed) are read as float4 along k and transposed on the way
// into shared memory; the others are copied as float4. Pointers and the row predicates
// are computed once; each K step only bumps a pointer and compares k.
template <int BX, int BK, int NT, int kPad, bool kKContig>
struct OperandLoader {
  static constexpr int kChunksPerRow = kKContig ? BK / 4 : BX / 4;
  static constexpr int kTileRows = kKContig ? BX : BK;
  static_assert(NT % kChunksPerRow == 0, "a row of chunks must not straddle threads unevenly");
  static constexpr int kPassRows = NT / kChunksPerRow;
  static constexpr int kPer = (kTileRows + kPassRows - 1) / kPassRows;

  const float* ptr;
  int64_t chunk_stride;
  int64_t tile_step;
  int row0;
  int col;
  unsigned fixed_ok;
  float4 reg[kPer];

  __device__ __forceinline__ static constexpr bool AlwaysActive() {
    return kTileRows % kPassRows == 0;
  }
  __device__ __forceinline__ bool Active(int i) const {
    return AlwaysActive() || row0 + i * kPassRows < kTileRows;
  }

  __device__ __forceinline__ void Init(const float* base, int64_t ld, int x0, int xdim,
                                       int k_begin, int tid) {
    row0 = tid / kChunksPerRow;
    col = (tid % kChunksPerRow) * 4;
    chunk_stride = kPassRows * ld;
    fixed_ok = 0;
    if (kKContig) {
      ptr = base + static_cast<int64_t>(x0 + row0) * ld + (k_begin + col);
      tile_step = BK;
#pragma unroll
      for (int i = 0; i < kPer; ++i) fixed_ok |= (x0 + row0 + i * kPassRows < xdim) << i;
    } else {
      ptr = base + static_cast<int64_t>(k_begin + row0) * ld + (x0 + col);
      tile_step = BK * ld;
      fixed_ok = x0 + col < xdim ? ~0u : 0u;
    }
  }

  __device__ __forceinline__ void Load(int k0, int k_end) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (Active(i)) {
        const bool k_ok = kKContig ? k0 + col < k_end : k0 + row0 + i * kPassRows < k_end;
        const bool ok = ((fixed_ok >> i) & 1u) && k_ok;
        reg[i] = ok ? *reinterpret_cast<const float4*>(ptr + i * chunk_stride)
                    : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    ptr += tile_step;
  }

  __device__ __forceinline__ void Store(float (*s)[BX + kPad]) const {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (Active(i)) {
        const int r = row0 + i * kPassRows;
        if (kKContig) {
          s[col + 0][r] = reg[i].x;
          s[col + 1][r] = reg[i].y;
          s[col + 2][r] = reg[i].z;
          s[col + 3][r] = reg[i].w;
        } else {
          *reinterpret_cast<float4*>(&s[r][col]) = reg[i];
        }
      }
    }
  }
};

template <class Cfg, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::MinBlocks)
    SgemmSimtKernel(const TileArgs args) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, NT = Cfg::kThreads;
  constexpr int TM = Cfg::TM, TN = Cfg::TN, TY = Cfg::TY, TX = Cfg::TX;
  constexpr int kPad = Cfg::kPad;

  __shared__ __align__(16) float As[2][BK][BM + kPad];
  __shared__ __align__(16) float Bs[2][BK][BN + kPad];

  const int tid = threadIdx.x;
  const BlockTile tile = BlockTileOf<BM, BN, BK>(args);
  const int m0 = tile.m0, n0 = tile.n0, split = tile.split, item = tile.item;
  const int k_begin = tile.k_begin, k_end = tile.k_end, num_k = tile.num_k;
  const int M = args.m, N = args.n;

  OperandLoader<BM, BK, NT, kPad, !kTransA> load_a;
  OperandLoader<BN, BK, NT, kPad, kTransB> load_b;
  load_a.Init(static_cast<const float*>(args.a) + item * args.stride_a, args.lda, m0, M,
              k_begin, tid);
  load_b.Init(static_cast<const float*>(args.b) + item * args.stride_b, args.ldb, n0, N,
              k_begin, tid);

  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wm0 = (warp / Cfg::WarpsN) * Cfg::WM;
  const int wn0 = (warp % Cfg::WarpsN) * Cfg::WN;
  const int ty = lane / TX;
  const int tx = lane % TX;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }

  if (num_k > 0) {
    load_a.Load(k_begin, k_end);
    load_b.Load(k_begin, k_end);
    load_a.Store(As[0]);
    load_b.Store(Bs[0]);
  }
  __syncthreads();

  // The next K slice travels global -> registers -> the other shared buffer while this
  // one is multiplied. A is fetched at step 0 and stored half-way, B fetched half-way
  // and stored at the end: each load has half a K step of FMAs to arrive, and only one
  // operand's staging registers are live at a time (what keeps 8x8 micro-tiles at
  // 128 registers, i.e. two blocks per multiprocessor, without spills).
  for (int kt = 0; kt < num_k; ++kt) {
    const int buf = kt & 1;
    const bool has_next = kt + 1 < num_k;
    const int k_next = k_begin + (kt + 1) * BK;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      if (kk == 0 && has_next) {
        load_a.Load(k_next, k_end);
        if (!Cfg::kSplitStaging) load_b.Load(k_next, k_end);
      }
      if (Cfg::kSplitStaging && kk == BK / 2 && has_next) {
        load_a.Store(As[buf ^ 1]);
        load_b.Load(k_next, k_end);
      }
      float a[TM];
      float b[TN];
#pragma unroll
      for (int r = 0; r < Cfg::RM; ++r) {
        *reinterpret_cast<float4*>(&a[r * 4]) =
            *reinterpret_cast<const float4*>(&As[buf][kk][wm0 + r * TY * 4 + ty * 4]);
      }
#pragma unroll
      for (int c = 0; c < Cfg::RN; ++c) {
        *reinterpret_cast<float4*>(&b[c * 4]) =
            *reinterpret_cast<const float4*>(&Bs[buf][kk][wn0 + c * TX * 4 + tx * 4]);
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    if (has_next) {
      if (!Cfg::kSplitStaging) load_a.Store(As[buf ^ 1]);
      load_b.Store(Bs[buf ^ 1]);
    }
    __syncthreads();
  }

  // Epilogue: alpha/beta straight from registers; float4 when rows allow it. beta == 0
  // never reads C (the caller may pass uninitialised or NaN memory).
  float* C = args.c + item * args.stride_c + split * args.split_stride_c;
  const float* C_in = args.beta != 0.0f ? args.c_in + item * args.stride_c_in : nullptr;
  const float alpha = args.alpha, beta = args.beta;
#pragma unroll
  for (int r = 0; r < Cfg::RM; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + wm0 + r * TY * 4 + ty * 4 + i;
      if (row >= M) continue;
      const int64_t row_off = static_cast<int64_t>(row) * args.ldc;
#pragma unroll
      for (int c = 0; c < Cfg::RN; ++c) {
        const int col = n0 + wn0 + c * TX * 4 + tx * 4;
        const float* v = &acc[r * 4 + i][c * 4];
        if (args.c_vec && col + 3 < N) {
          float4 out = make_float4(alpha * v[0], alpha * v[1], alpha * v[2], alpha * v[3]);
          if (C_in != nullptr) {
            const float4 old = *reinterpret_cast<const float4*>(C_in + row_off + col);
            out.x = fmaf(beta, old.x, out.x);
            out.y = fmaf(beta, old.y, out.y);
            out.z = fmaf(beta, old.z, out.z);
            out.w = fmaf(beta, old.w, out.w);
          }
          *reinterpret_cast<float4*>(C + row_off + col) = out;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (col + e < N) {
              float out = alpha * v[e];
              if (C_in != nullptr) out = fmaf(beta, C_in[row_off + col + e], out);
              C[row_off + col + e] = out;
            }
          }
        }
      }
    }
  }
}

template <class Cfg>
absl::Status LaunchSimt(const TileArgs& t, cudaStream_t stream) {
  const int64_t tiles =
      static_cast<int64_t>((t.m + Cfg::BM - 1) / Cfg::BM) * ((t.n + Cfg::BN - 1) / Cfg::BN);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(t.splits),
                  static_cast<unsigned>(t.batch));
  const dim3 block(Cfg::kThreads);
  if (!t.trans_a && !t.trans_b) {
    SgemmSimtKernel<Cfg, false, false><<<grid, block, 0, stream>>>(t);
  } else if (!t.trans_a && t.trans_b) {
    SgemmSimtKernel<Cfg, false, true><<<grid, block, 0, stream>>>(t);
  } else if (t.trans_a && !t.trans_b) {
    SgemmSimtKernel<Cfg, true, false><<<grid, block, 0, stream>>>(t);
  } else {
    SgemmSimtKernel<Cfg, true, true><<<grid, block, 0, stream>>>(t);
  }
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

//                             BM   BN  BK warps RM RN blocks/SM split staging
using Simt128x128x8 = SimtTile<128, 128, 8, 2, 4, 2, 2, 2, true>;   // 256 thr, 8x8/thread
using Simt64x64x8 = SimtTile<64, 64, 8, 2, 2, 1, 2, 4, false>;      // 128 thr, 4x8/thread
using Simt16x128x16 = SimtTile<16, 128, 16, 1, 4, 1, 1, 4, false>;  // 128 thr, 4x4/thread

TileVariant Simt(const char* name, int bm, int bn, int bk, bool split_k, CostProfile profile,
                 TileLaunchFn fn) {
  TileVariant v;
  v.name = name;
  v.precision = Precision::kFp32;
  v.operand_type = DataType::kFloat32;
  v.min_compute_capability = 80;  // the library is built for sm_80 and up
  v.tile_m = bm;
  v.tile_n = bn;
  v.tile_k = bk;
  v.split_k = split_k;
  v.profile = profile;
  v.launch = fn;
  return v;
}

}  // namespace

// Cost profiles: TFLOP/s and resident blocks per SM (CostProfile), H200, gemm-bench
// 2026-11-30.
void AppendSimtKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels) {
  kernels->push_back(MakeTiledGemmKernel(Simt("sgemm_simt_128x128x8", 128, 128, 8, false,
                                              {43.5, 2}, &LaunchSimt<Simt128x128x8>)));
  kernels->push_back(MakeTiledGemmKernel(Simt("sgemm_simt_64x64x8_splitk", 64, 64, 8, true,
                                              {34.0, 4}, &LaunchSimt<Simt64x64x8>)));
  kernels->push_back(MakeTiledGemmKernel(Simt("sgemm_simt_16x128x16_splitk", 16, 128, 16, true,
                                              {27.0, 4}, &LaunchSimt<Simt16x128x16>)));
}

}  // namespace gemmd::gpu::internal
