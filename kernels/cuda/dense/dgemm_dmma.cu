// FP64 GEMM (PRECISION_FP64) on the FP64 tensor cores: DMMA, `mma.sync.m8n8k4` with f64
// operands and accumulators (sm_80 and up, Hopper included).
//
// A block computes a 128 x 128 tile of C with 8 warps (2 x 4), each warp a 64 x 32 tile as
// 8 x 4 DMMA tiles of 8 x 8: 64 FP64 accumulators a thread. Per K step of 16, A and B are
// staged k-major in shared memory (As[k][m], Bs[k][n]), each k row padded by 8 doubles so
// that a fragment load (lanes 4 apart on k, 1 apart on m or n) takes the two wavefronts
// 256 bytes need and no more. The stages are filled by 8-byte cp.async that zero-fill
// past M, N and K, three deep, so the loads of step k+2 run under the DMMAs of step k.
// The loader reads each operand as stored (any transpose, any leading dimension): no
// packing pass, no workspace. C = alpha * acc + beta * C_in in FP64 (C_in never read
// when beta is 0), each element written once with bounds checks, so a row block of a
// planned product gets its whole product's bits (no K split here).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/dense/dgemm_dmma.h"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = kDgemmTileM, kBN = kDgemmTileN, kBK = 16, kStages = 3;
constexpr int kWM = 64, kWN = 32;
constexpr int kWarpsN = kBN / kWN;                    // 4
constexpr int kThreads = (kBM / kWM) * kWarpsN * 32;  // 256
constexpr int kLdA = kBM + 8, kLdB = kBN + 8;         // doubles per k row of As, Bs
constexpr int kStageDoubles = kBK * (kLdA + kLdB);
constexpr int kSmemBytes = kStages * kStageDoubles * static_cast<int>(sizeof(double));
constexpr int kFragM = kWM / 8, kFragN = kWN / 8;  // DMMA tiles a warp: 8 x 4
constexpr int kMaxGridZ = 65535;

__device__ __forceinline__ void Dmma(double (&d)[2], double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
#endif
}

// One stage of A (rows [m0, m0+kBM), K [k0, k0+kBK)) into As[k][m].
template <bool kTransA>
__device__ __forceinline__ void LoadA(const DgemmArgs& p, const double* a, double* as, int m0,
                                      int k0, int tid) {
#pragma unroll
  for (int i = 0; i < kBM * kBK / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    // Consecutive threads on the stored matrix's contiguous dimension.
    const int mm = kTransA ? idx % kBM : idx / kBK;
    const int kk = kTransA ? idx / kBM : idx % kBK;
    const int gm = m0 + mm, gk = k0 + kk;
    const bool in = gm < p.m && gk < p.k;
    const int64_t at =
        kTransA ? static_cast<int64_t>(gk) * p.lda + gm : static_cast<int64_t>(gm) * p.lda + gk;
    CpAsync8(as + kk * kLdA + mm, in ? a + at : a, in ? 8 : 0);
  }
}

// One stage of B (K [k0, k0+kBK), columns [n0, n0+kBN)) into Bs[k][n].
template <bool kTransB>
__device__ __forceinline__ void LoadB(const DgemmArgs& p, const double* b, double* bs, int n0,
                                      int k0, int tid) {
#pragma unroll
  for (int i = 0; i < kBN * kBK / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int nn = kTransB ? idx / kBK : idx % kBN;
    const int kk = kTransB ? idx % kBK : idx / kBN;
    const int gn = n0 + nn, gk = k0 + kk;
    const bool in = gn < p.n && gk < p.k;
    const int64_t at =
        kTransB ? static_cast<int64_t>(gn) * p.ldb + gk : static_cast<int64_t>(gk) * p.ldb + gn;
    CpAsync8(bs + kk * kLdB + nn, in ? b + at : b, in ? 8 : 0);
  }
}

template <bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads, 1) DgemmDmmaKernel(DgemmArgs p, int item0) {
  extern __shared__ double smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int item = item0 + static_cast<int>(blockIdx.z);
  const int m0 = static_cast<int>(blockIdx.y) * kBM;
  const int n0 = static_cast<int>(blockIdx.x) * kBN;
  const double* a = p.a + item * p.stride_a;
  const double* b = p.b + item * p.stride_b;

  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / kWarpsN) * kWM, wn = (warp % kWarpsN) * kWN;
  const int g = lane >> 2, t = lane & 3;  // DMMA fragment: row (A, C) / column (B), k
  double acc[kFragM][kFragN][2];
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragN; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;
  }

  const int ktiles = (p.k + kBK - 1) / kBK;
  auto load = [&](int kt) {
    double* stage = smem + (kt % kStages) * kStageDoubles;
    LoadA<kTransA>(p, a, stage, m0, kt * kBK, tid);
    LoadB<kTransB>(p, b, stage + kBK * kLdA, n0, kt * kBK, tid);
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load(s);
    CpAsyncCommit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    CpAsyncWait<kStages - 2>();
    // Stage kt has landed for every thread, and every warp is done with the stage the
    // next load overwrites (computed in the previous step).
    __syncthreads();
    if (kt + kStages - 1 < ktiles) load(kt + kStages - 1);
    CpAsyncCommit();
    const double* as = smem + (kt % kStages) * kStageDoubles;
    const double* bs = as + kBK * kLdA;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 4) {
      double af[kFragM], bf[kFragN];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) af[i] = as[(kk + t) * kLdA + wm + i * 8 + g];
#pragma unroll
      for (int j = 0; j < kFragN; ++j) bf[j] = bs[(kk + t) * kLdB + wn + j * 8 + g];
#pragma unroll
      for (int i = 0; i < kFragM; ++i) {
#pragma unroll
        for (int j = 0; j < kFragN; ++j) Dmma(acc[i][j], af[i], bf[j]);
      }
    }
  }

  double* c = p.c + item * p.stride_c;
  const double* c_in = p.beta != 0.0 ? p.c_in + item * p.stride_c_in : nullptr;
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
    const int row = m0 + wm + i * 8 + g;
    if (row >= p.m) continue;
#pragma unroll
    for (int j = 0; j < kFragN; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + wn + j * 8 + 2 * t + e;
        if (col >= p.n) continue;
        const int64_t at = static_cast<int64_t>(row) * p.ldc + col;
        double v = p.alpha * acc[i][j][e];
        if (c_in != nullptr) v += p.beta * c_in[at];
        c[at] = v;
      }
    }
  }
}

template <bool kTransA, bool kTransB>
absl::Status LaunchLayout(const DgemmArgs& p, int batch, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  const void* fn = reinterpret_cast<const void*>(&DgemmDmmaKernel<kTransA, kTransB>);
  GEMMD_GPU_RETURN_IF_ERROR(EnsureDynamicSmem(fn, kSmemBytes, &smem_set));
  const dim3 block(kThreads);
  for (int item0 = 0; item0 < batch; item0 += kMaxGridZ) {
    const dim3 grid((p.n + kBN - 1) / kBN, (p.m + kBM - 1) / kBM,
                    std::min(kMaxGridZ, batch - item0));
    DgemmDmmaKernel<kTransA, kTransB><<<grid, block, kSmemBytes, stream>>>(p, item0);
    RETURN_IF_CUDA_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchDgemmM8n8k4(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                               cudaStream_t stream) {
  if (!trans_a && !trans_b) return LaunchLayout<false, false>(p, batch, stream);
  if (!trans_a && trans_b) return LaunchLayout<false, true>(p, batch, stream);
  if (trans_a && !trans_b) return LaunchLayout<true, false>(p, batch, stream);
  return LaunchLayout<true, true>(p, batch, stream);
}

namespace {

// The registry entry of one FP64 variant: checks, geometry and the launch, around its
// launcher (every variant tiles C 128 rows by tile_n columns and needs no workspace).
class DgemmDmma final : public GpuGemmKernel {
 public:
  DgemmDmma(const char* name, int min_cc, CostProfile profile, DgemmLaunchFn launch,
            int tile_n = kDgemmTileN)
      : name_(name), min_cc_(min_cc), profile_(profile), launch_(launch), tile_n_(tile_n) {}
  std::string_view name() const override { return name_; }
  Precision precision() const override { return Precision::kFp64; }
  int min_compute_capability() const override { return min_cc_; }
  DataType operand_type() const override { return DataType::kFloat64; }
  bool splits_k() const override { return false; }
  CostProfile cost_profile() const override { return profile_; }

  absl::Status Check(const GemmProblem& p) const override {
    if (p.batch < 1 || p.m < 1 || p.n < 1 || p.k < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch, m and n must be positive and k not negative; got [", p.batch, ",",
                       p.m, ",", p.n, ",", p.k, "]"));
    }
    if (p.precision != Precision::kFp64) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kernel ", Sv(name()), " computes FP64, not ", Sv(PrecisionName(p.precision))));
    }
    if (p.a_type != DataType::kFloat64 || p.b_type != DataType::kFloat64 ||
        p.c_type != DataType::kFloat64) {
      return absl::FailedPreconditionError(
          absl::StrCat("kernel ", Sv(name()),
                       " takes FLOAT64 operands and C; got a=", Sv(DataTypeName(p.a_type)),
                       " b=", Sv(DataTypeName(p.b_type)), " c=", Sv(DataTypeName(p.c_type))));
    }
    if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX || p.batch > INT_MAX) {
      return absl::FailedPreconditionError(
          absl::StrCat("kernel ", Sv(name()), " indexes M, N, K and the batch with 32 bits"));
    }
    return absl::OkStatus();
  }

  LaunchGeometry Geometry(const GemmProblem& p) const override {
    if (!CanImplement(p)) return {};
    LaunchGeometry g;
    g.tile_m = kDgemmTileM;
    g.tile_n = tile_n_;
    g.tile_k = kBK;
    g.splits = 1;
    g.k_per_split = p.k;
    g.blocks =
        p.batch * ((p.PlanM() + kDgemmTileM - 1) / kDgemmTileM) * ((p.n + tile_n_ - 1) / tile_n_);
    return g;
  }

  size_t WorkspaceBytes(const GemmProblem&) const override { return 0; }
  size_t WorkspaceBytes(const GemmProblem&, const GemmOperands&) const override { return 0; }

  absl::Status Launch(const GemmProblem& p, const GemmOperands& operands, void*, size_t,
                      cudaStream_t stream) const override {
    if (absl::Status s = Check(p); !s.ok()) return s;
    const bool read_c = p.beta != 0.0;
    // K = 0 reads neither A nor B (C = beta * C_in).
    if ((p.k > 0 && (operands.a == nullptr || operands.b == nullptr)) ||
        operands.c_out == nullptr || (read_c && operands.c_in == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel ", Sv(name()), ": null operand (C input needed when beta != 0)"));
    }
    for (const void* ptr :
         {operands.a, operands.b, operands.c_in, static_cast<const void*>(operands.c_out)}) {
      if (reinterpret_cast<uintptr_t>(ptr) % alignof(double) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel ", Sv(name()), ": FLOAT64 operands must be 8-byte aligned"));
      }
    }
    DgemmArgs args;
    args.m = static_cast<int>(p.m);
    args.n = static_cast<int>(p.n);
    args.k = static_cast<int>(p.k);
    args.lda = p.lda();
    args.ldb = p.ldb();
    args.ldc = p.ldc();
    args.stride_a = p.StrideA();
    args.stride_b = p.StrideB();
    args.stride_c_in = p.StrideCIn();
    args.stride_c = p.StrideC();
    args.a = static_cast<const double*>(operands.a);
    args.b = static_cast<const double*>(operands.b);
    args.c_in = read_c ? static_cast<const double*>(operands.c_in) : nullptr;
    args.c = static_cast<double*>(operands.c_out);
    args.alpha = p.alpha;
    args.beta = read_c ? p.beta : 0.0;
    return launch_(args, static_cast<int>(p.batch), p.transpose_a, p.transpose_b, stream);
  }

 private:
  const char* const name_;
  const int min_cc_;
  const CostProfile profile_;
  const DgemmLaunchFn launch_;
  const int tile_n_;
};

}  // namespace

// Cost profiles: TFLOP/s at 4096^3 and resident blocks per SM, gemm-bench on an H100,
// 2026-12-06 and 2026-12-07 (docs/KERNELS.md); the variants that lost sit below the others.
// On 9.0 step 9 (`tma_..._u`) is the one chosen.
void AppendDmmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels) {
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma_128x128x16_s3", 80,
                                                 CostProfile{21.2, 1}, &LaunchDgemmM8n8k4));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_128x64x16_s3_checked", 90,
                                                 CostProfile{41.0, 2}, &LaunchDgemmM16n8k8Checked,
                                                 64));
  kernels->push_back(std::make_unique<DgemmDmma>(
      "dgemm_dmma1688_128x64x16_s3_g8", 90, CostProfile{49.6, 2}, &LaunchDgemmM16n8k8Grouped, 64));
  kernels->push_back(std::make_unique<DgemmDmma>(
      "dgemm_dmma1688_128x64x16_s3", 90, CostProfile{48.4, 2}, &LaunchDgemmM16n8k8Pipelined, 64));
  kernels->push_back(std::make_unique<DgemmDmma>(
      "dgemm_dmma1688_128x64x16_s3_split", 90, CostProfile{48.0, 2}, &LaunchDgemmM16n8k8Split, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_128x64x16_s3_split_u", 90,
                                                 CostProfile{47.9, 2},
                                                 &LaunchDgemmM16n8k8SplitUniform, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_128x64x16_s3_g8_split", 90,
                                                 CostProfile{45.0, 2},
                                                 &LaunchDgemmM16n8k8GroupedSplit, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_128x64x16_s3_g8_il", 90,
                                                 CostProfile{45.0, 2},
                                                 &LaunchDgemmM16n8k8GroupedInterleaved, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_128x64x32_s2_g8", 90,
                                                 CostProfile{45.0, 2},
                                                 &LaunchDgemmM16n8k8K32TwoStages, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_tma_128x64x16_s4_g8", 90,
                                                 CostProfile{45.0, 2}, &LaunchDgemmM16n8k8Tma, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_tma_128x64x16_s4_g8_u", 90,
                                                 CostProfile{51.4, 2},
                                                 &LaunchDgemmM16n8k8TmaUnrolled, 64));
  kernels->push_back(std::make_unique<DgemmDmma>("dgemm_dmma1688_128x64x16_s3_il", 90,
                                                 CostProfile{45.0, 2},
                                                 &LaunchDgemmM16n8k8Interleaved, 64));
}

}  // namespace gemmd::gpu::internal
