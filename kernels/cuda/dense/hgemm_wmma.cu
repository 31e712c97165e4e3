// WMMA tensor-core GEMM (PRECISION_FP16_TENSOR): FP16 (hgemm_*) or BF16 (bgemm_*)
// operands, FP32 accumulation, FP32 output, through nvcuda::wmma (m16n16k16 fragments,
// which compile to LDSM + HMMA.16816, i.e. mma.sync, on sm_80/sm_90).
//
// The optimisations, in the order they matter:
//   * Multi-warp block tiles with 64x64 warp tiles (4x4 fragments per warp): each
//     fragment loaded from shared memory feeds 4 MMAs.
//   * A cp.async pipeline of 4 stages (16-byte global->shared copies that bypass the
//     registers, zero-filled past the matrix edges): the next tiles are in flight while
//     the current one is multiplied; one __syncthreads per K step.
//   * Shared-memory rows skewed by 8 elements (16 bytes): the 8 rows each ldmatrix
//     phase reads fall into different bank groups.
//   * Blocks rasterised in groups of 8 tile rows, for L2 reuse.
//   * Epilogue through a per-warp shared-memory staging tile: alpha/beta, predicated
//     edges and coalesced float4 stores of C.
//
// The shipped tile is 128x128x32 with 4 stages and 4 warps (2 blocks/SM: one block's
// barrier waits are covered by the other). What it buys: 46% / 47% of cuBLAS FP16
// (cublasGemmEx) at 4096^3 / 8192^3 on the H200 (docs/KERNELS.md has the ladder, the
// variants that lost and the ncu profile). Register-hungry warp tiles and L2 bandwidth
// cap mma.sync here; wgmma + TMA is the next step.
// FP32 inputs are rounded to FP16 by the packer (pack.cu) into the workspace first.
// The 64x64x32 split-K variant serves skinny and small batched problems.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/dense/block_tile.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

namespace wmma = nvcuda::wmma;

template <typename kT, int kBM, int kBN, int kBK, int kWarpsM, int kWarpsN, int kStages>
struct WmmaTile {
  using T = kT;
  static constexpr int BM = kBM;
  static constexpr int BN = kBN;
  static constexpr int BK = kBK;
  static constexpr int WarpsN = kWarpsN;
  static constexpr int kWarps = kWarpsM * kWarpsN;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int WM = kBM / kWarpsM;
  static constexpr int WN = kBN / kWarpsN;
  static constexpr int FM = WM / 16;  // fragments per warp
  static constexpr int FN = WN / 16;
  static constexpr int Stages = kStages;
  static constexpr int kSkew = 8;  // elements: 16 bytes
  static constexpr int kChunk = 8;  // elements per 16-byte cp.async

  static_assert(sizeof(T) == 2, "WMMA operands are 16-bit");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be whole 16x16 fragments");
  static_assert(kBK % 16 == 0, "K step must be whole fragments");
  static_assert(kStages >= 2, "the pipeline needs at least two stages");
  static_assert(WN % 4 == 0 && WN / 4 <= 32 && 32 % (WN / 4) == 0,
                "epilogue maps a warp onto whole rows of the warp tile");
  static_assert((kBM * kBK / kChunk) % kThreads == 0 && (kBN * kBK / kChunk) % kThreads == 0,
                "every thread copies the same number of 16-byte chunks");

  // Shared-memory leading dimensions and stage sizes (elements) per layout.
  template <bool kTransA>
  static constexpr int LdA() { return kTransA ? kBM + kSkew : kBK + kSkew; }
  template <bool kTransA>
  static constexpr int StageA() { return kTransA ? kBK * LdA<kTransA>() : kBM * LdA<kTransA>(); }
  template <bool kTransB>
  static constexpr int LdB() { return kTransB ? kBK + kSkew : kBN + kSkew; }
  template <bool kTransB>
  static constexpr int StageB() { return kTransB ? kBN * LdB<kTransB>() : kBK * LdB<kTransB>(); }
  static constexpr int kEpilogueBytes = kWarps * 16 * (WN + 4) * 4;
  template <bool kTransA, bool kTransB>
  static constexpr int SmemBytes() {
    const int pipeline = kStages * (StageA<kTransA>() + StageB<kTransB>()) * 2;
    return pipeline > kEpilogueBytes ? pipeline : kEpilogueBytes;
  }
};

// Fragment loads from shared memory. FP16 goes through wmma::load_matrix_sync, which
// compiles to LDSM (ldmatrix). The header's BF16 loads emit `wmma.load...bf16` without
// the .shared state space, i.e. generic loads instead of LDSM; on the H200 that cost
// a third of the BF16 rate (docs/KERNELS.md). The same PTX instruction with .shared
// fills the same fragment registers.
template <class Use, class Layout>
__device__ __forceinline__ void LoadFragment(
    wmma::fragment<Use, 16, 16, 16, __half, Layout>& f, const __half* p, unsigned ldm) {
  wmma::load_matrix_sync(f, p, ldm);
}

#define GEMMD_WMMA_LOAD_BF16(USE, LAYOUT, PTX)                                          \
  __device__ __forceinline__ void LoadFragment(                                         \
      wmma::fragment<wmma::USE, 16, 16, 16, __nv_bfloat16, wmma::LAYOUT>& f,           \
      const __nv_bfloat16* p, unsigned ldm) {                                           \
    static_assert(sizeof(f.x) == 16, "a 16x16 BF16 fragment is four 32-bit registers"); \
    unsigned* r = reinterpret_cast<unsigned*>(f.x);                                     \
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));           \
    asm volatile(PTX " {%0, %1, %2, %3}, [%4], %5;\n"                                  \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                       \
                 : "r"(addr), "r"(ldm)                                                  \
                 : "memory");                                                           \
  }
GEMMD_WMMA_LOAD_BF16(matrix_a, row_major, "wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16")
GEMMD_WMMA_LOAD_BF16(matrix_a, col_major, "wmma.load.a.sync.aligned.col.m16n16k16.shared.bf16")
GEMMD_WMMA_LOAD_BF16(matrix_b, row_major, "wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16")
GEMMD_WMMA_LOAD_BF16(matrix_b, col_major, "wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16")
#undef GEMMD_WMMA_LOAD_BF16

template <class Cfg, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(Cfg::kThreads, 1) WmmaGemmKernel(const TileArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // cp.async and BF16 fragments need sm_80; the registry says so too.
#else
  using T = typename Cfg::T;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, NT = Cfg::kThreads;
  constexpr int kStages = Cfg::Stages, CH = Cfg::kChunk;
  constexpr int LDA = Cfg::template LdA<kTransA>();
  constexpr int LDB = Cfg::template LdB<kTransB>();
  constexpr int kStageA = Cfg::template StageA<kTransA>();
  constexpr int kStageB = Cfg::template StageB<kTransB>();
  constexpr int kPerThreadA = BM * BK / CH / NT;
  constexpr int kPerThreadB = BN * BK / CH / NT;
  using LayoutA = std::conditional_t<kTransA, wmma::col_major, wmma::row_major>;
  using LayoutB = std::conditional_t<kTransB, wmma::col_major, wmma::row_major>;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sA = reinterpret_cast<T*>(smem);
  T* sB = sA + kStages * kStageA;

  const int tid = threadIdx.x;
  const BlockTile tile = BlockTileOf<BM, BN, BK>(args);
  const int m0 = tile.m0, n0 = tile.n0, split = tile.split, item = tile.item;
  const int k_begin = tile.k_begin, k_end = tile.k_end, num_k = tile.num_k;
  const int M = args.m, N = args.n;
  const T* A = static_cast<const T*>(args.a) + item * args.stride_a;
  const T* B = static_cast<const T*>(args.b) + item * args.stride_b;

  auto load_stage = [&](int stage, int k0) {
    T* dA = sA + stage * kStageA;
    T* dB = sB + stage * kStageB;
#pragma unroll
    for (int i = 0; i < kPerThreadA; ++i) {
      const int c = tid + i * NT;
      int r, q, gm, gk;
      const T* src;
      if (!kTransA) {  // rows of A[M,K]: chunks along k
        r = c / (BK / CH);
        q = (c % (BK / CH)) * CH;
        gm = m0 + r;
        gk = k0 + q;
        src = A + static_cast<int64_t>(gm) * args.lda + gk;
      } else {  // rows of stored A[K,M]: chunks along m
        r = c / (BM / CH);
        q = (c % (BM / CH)) * CH;
        gk = k0 + r;
        gm = m0 + q;
        src = A + static_cast<int64_t>(gk) * args.lda + gm;
      }
      const bool ok = gm < M && gk < k_end;
      CpAsync16(dA + r * LDA + q, ok ? src : A, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kPerThreadB; ++i) {
      const int c = tid + i * NT;
      int r, q, gn, gk;
      const T* src;
      if (!kTransB) {  // rows of B[K,N]: chunks along n
        r = c / (BN / CH);
        q = (c % (BN / CH)) * CH;
        gk = k0 + r;
        gn = n0 + q;
        src = B + static_cast<int64_t>(gk) * args.ldb + gn;
      } else {  // rows of stored B[N,K]: chunks along k
        r = c / (BK / CH);
        q = (c % (BK / CH)) * CH;
        gn = n0 + r;
        gk = k0 + q;
        src = B + static_cast<int64_t>(gn) * args.ldb + gk;
      }
      const bool ok = gn < N && gk < k_end;
      CpAsync16(dB + r * LDB + q, ok ? src : B, ok ? 16 : 0);
    }
  };

  const int warp = tid / 32;
  const int lane = tid % 32;
  const int wm0 = (warp / Cfg::WarpsN) * Cfg::WM;
  const int wn0 = (warp % Cfg::WarpsN) * Cfg::WN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Cfg::FM][Cfg::FN];
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_k) load_stage(s, k_begin + s * BK);
    CpAsyncCommit();
  }

  for (int kt = 0; kt < num_k; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage kt landed for everyone; stage kt-1 is free to refill
    const int next = kt + kStages - 1;
    if (next < num_k) load_stage(next % kStages, k_begin + next * BK);
    CpAsyncCommit();

    const T* tA = sA + (kt % kStages) * kStageA;
    const T* tB = sB + (kt % kStages) * kStageB;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> af[Cfg::FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> bf[Cfg::FN];
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i) {
        const T* p = kTransA ? tA + kk * LDA + wm0 + i * 16 : tA + (wm0 + i * 16) * LDA + kk;
        LoadFragment(af[i], p, LDA);
      }
#pragma unroll
      for (int j = 0; j < Cfg::FN; ++j) {
        const T* p = kTransB ? tB + (wn0 + j * 16) * LDB + kk : tB + kk * LDB + wn0 + j * 16;
        LoadFragment(bf[j], p, LDB);
      }
#pragma unroll
      for (int i = 0; i < Cfg::FM; ++i) {
#pragma unroll
        for (int j = 0; j < Cfg::FN; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
      }
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline buffers become the epilogue staging area

  // Epilogue: one 16-row strip of the warp tile at a time through shared memory, then
  // coalesced, predicated float4 stores with alpha/beta. beta == 0 never reads C.
  constexpr int kLdStage = Cfg::WN + 4;
  constexpr int kLanesPerRow = Cfg::WN / 4;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  float* stage = reinterpret_cast<float*>(smem) + warp * 16 * kLdStage;
  float* C = args.c + item * args.stride_c + split * args.split_stride_c;
  const float* C_in = args.beta != 0.0f ? args.c_in + item * args.stride_c_in : nullptr;
  const float alpha = args.alpha, beta = args.beta;
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j) {
      wmma::store_matrix_sync(stage + j * 16, acc[i][j], kLdStage, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int r0 = 0; r0 < 16; r0 += kRowsPerPass) {
      const int r = r0 + lane / kLanesPerRow;
      const int cc = (lane % kLanesPerRow) * 4;
      const int row = m0 + wm0 + i * 16 + r;
      const int col = n0 + wn0 + cc;
      if (row < M) {
        const float4 v = *reinterpret_cast<const float4*>(stage + r * kLdStage + cc);
        const int64_t off = static_cast<int64_t>(row) * args.ldc + col;
        if (args.c_vec && col + 3 < N) {
          float4 out = make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w);
          if (C_in != nullptr) {
            const float4 old = *reinterpret_cast<const float4*>(C_in + off);
            out.x = fmaf(beta, old.x, out.x);
            out.y = fmaf(beta, old.y, out.y);
            out.z = fmaf(beta, old.z, out.z);
            out.w = fmaf(beta, old.w, out.w);
          }
          *reinterpret_cast<float4*>(C + off) = out;
        } else {
          const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (col + e < N) {
              float out = alpha * vals[e];
              if (C_in != nullptr) out = fmaf(beta, C_in[off + e], out);
              C[off + e] = out;
            }
          }
        }
      }
    }
    __syncwarp();
  }
#endif
}

template <class Cfg, bool kTransA, bool kTransB>
absl::Status LaunchWmmaLayout(const TileArgs& t, cudaStream_t stream) {
  constexpr int kSmem = Cfg::template SmemBytes<kTransA, kTransB>();
  static std::atomic<uint64_t> configured{0};
  const auto kernel = &WmmaGemmKernel<Cfg, kTransA, kTransB>;
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kSmem, &configured));
  const int64_t tiles =
      static_cast<int64_t>((t.m + Cfg::BM - 1) / Cfg::BM) * ((t.n + Cfg::BN - 1) / Cfg::BN);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(t.splits),
                  static_cast<unsigned>(t.batch));
  kernel<<<grid, Cfg::kThreads, kSmem, stream>>>(t);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <class Cfg>
absl::Status LaunchWmma(const TileArgs& t, cudaStream_t stream) {
  if (!t.trans_a && !t.trans_b) return LaunchWmmaLayout<Cfg, false, false>(t, stream);
  if (!t.trans_a && t.trans_b) return LaunchWmmaLayout<Cfg, false, true>(t, stream);
  if (t.trans_a && !t.trans_b) return LaunchWmmaLayout<Cfg, true, false>(t, stream);
  return LaunchWmmaLayout<Cfg, true, true>(t, stream);
}

template <typename T>
using Wmma128x128x32s4 = WmmaTile<T, 128, 128, 32, 2, 2, 4>;  // 4 warps of 64x64
template <typename T>
using Wmma64x64x32s4 = WmmaTile<T, 64, 64, 32, 2, 2, 4>;      // 4 warps of 32x32

template <class Cfg>
TileVariant Wmma(const char* name, DataType operand_type, bool split_k, CostProfile profile) {
  TileVariant v;
  v.name = name;
  v.precision = Precision::kFp16Tensor;
  v.operand_type = operand_type;
  v.min_compute_capability = 80;  // cp.async, BF16 fragments
  v.tile_m = Cfg::BM;
  v.tile_n = Cfg::BN;
  v.tile_k = Cfg::BK;
  v.split_k = split_k;
  v.profile = profile;
  v.launch = &LaunchWmma<Cfg>;
  return v;
}

}  // namespace

// Cost profiles: TFLOP/s and resident blocks per SM (CostProfile), H200, gemm-bench
// 2026-11-30 (BF16 runs as fast as FP16).
void AppendWmmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels) {
  constexpr DataType kF16 = DataType::kFloat16;
  constexpr DataType kBF16 = DataType::kBFloat16;
  constexpr CostProfile kLarge{331.0, 2}, kSplitK{190.0, 4};
  kernels->push_back(MakeTiledGemmKernel(
      Wmma<Wmma128x128x32s4<__half>>("hgemm_wmma_128x128x32_s4", kF16, false, kLarge)));
  kernels->push_back(MakeTiledGemmKernel(
      Wmma<Wmma64x64x32s4<__half>>("hgemm_wmma_64x64x32_s4_splitk", kF16, true, kSplitK)));
  kernels->push_back(MakeTiledGemmKernel(Wmma<Wmma128x128x32s4<__nv_bfloat16>>(
      "bgemm_wmma_128x128x32_s4", kBF16, false, kLarge)));
  kernels->push_back(MakeTiledGemmKernel(Wmma<Wmma64x64x32s4<__nv_bfloat16>>(
      "bgemm_wmma_64x64x32_s4_splitk", kBF16, true, kSplitK)));
}

}  // namespace gemmd::gpu::internal
