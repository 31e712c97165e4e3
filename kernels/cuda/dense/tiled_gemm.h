// Internal to gemm_kernels_cuda: the host side shared by every tiled kernel family
// (FP32 SIMT, WMMA FP16/BF16). A family provides a tile launcher for one tile shape; this
// file turns a GemmProblem into launches of it: validation, repacking/converting
// operands the tile kernel cannot read directly, split-K with a reduction, batches
// larger than a grid dimension. Host-only; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_DENSE_TILED_GEMM_H_
#define GEMMD_KERNELS_CUDA_DENSE_TILED_GEMM_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/gemm_problem.h"

namespace gemmd::gpu::internal {

// This abseil may predate absl::string_view == std::string_view; StrCat needs this.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// What a tile kernel reads and writes: one launch covers `batch` items (grid.z) and
// `splits` K-slices (grid.y) of a batch of tiles (grid.x). Operands A/B are of the
// family's operand type, 16-byte aligned, leading dimensions and batch strides
// multiples of 16 bytes, with any padding columns past K (or past M/N) finite (the
// packer writes zeros there). Element indices are int64 on the host and in the kernels'
// base-pointer arithmetic.
struct TileArgs {
  int m = 0;
  int n = 0;
  int k = 0;
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;  // for c_in and c
  int64_t stride_a = 0;
  int64_t stride_b = 0;
  int64_t stride_c_in = 0;
  int64_t stride_c = 0;
  int64_t split_stride_c = 0;  // elements between split-K partials of one item
  const void* a = nullptr;
  const void* b = nullptr;
  const float* c_in = nullptr;  // read only when beta != 0
  float* c = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
  int batch = 1;
  int splits = 1;
  int k_per_split = 0;  // multiple of the tile's K-step
  bool c_vec = false;   // 16-byte vector access to c (and c_in) is allowed
  bool trans_a = false;
  bool trans_b = false;
};

using TileLaunchFn = absl::Status (*)(const TileArgs& args, cudaStream_t stream);

// Static description of one registered variant.
struct TileVariant {
  std::string name;
  Precision precision = Precision::kFp32;
  DataType operand_type = DataType::kFloat32;  // what the tile kernel reads
  int min_compute_capability = 80;
  int tile_m = 0;
  int tile_n = 0;
  int tile_k = 0;
  bool split_k = false;
  int64_t split_k_target_blocks = 0;  // blocks split-K aims at (0: the family default)
  // The tile reads K-major operands only (A [M,K], B [N,K]: trans_a false, trans_b true);
  // the others are transposed into the workspace first.
  bool k_major = false;
  // ... except B, which it also reads stored [K, N] (trans_b false) as it is.
  bool b_either_major = false;
  bool sm90a_only = false;  // arch-specific code: compute capability 9.0 exactly
  CostProfile profile;
  TileLaunchFn launch = nullptr;
};

// A registry entry built from a TileVariant.
std::unique_ptr<GpuGemmKernel> MakeTiledGemmKernel(TileVariant variant);

// Families append their variants (explicit calls instead of static registrars, which a
// static library would drop at link time).
void AppendSimtKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels);
void AppendWmmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels);
void AppendWgmmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels);
void AppendWgmmaTmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels);
// FP64 (dgemm_dmma.cu): a family of its own, outside the tiled host side (FP64 C).
void AppendDmmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels);

// Copies a strided batch of `items` row-major [rows, cols] matrices (leading dimension
// ld_src, batch stride stride_src) of type `src_type` into dense matrices with leading
// dimension ld_dst >= cols and batch stride stride_dst of type `dst_type`, rounding to
// nearest even; columns [cols, ld_dst) are written as zeros. Defined in pack.cu.
absl::Status LaunchPack(DataType src_type, const void* src, int64_t rows, int64_t cols,
                        int64_t ld_src, int64_t stride_src, int64_t items,
                        DataType dst_type, void* dst, int64_t ld_dst, int64_t stride_dst,
                        cudaStream_t stream);

// The same, transposed: each item's [rows, cols] source becomes a [cols, rows] matrix
// with leading dimension ld_dst >= rows (columns [rows, ld_dst) zeros). Defined in pack.cu.
absl::Status LaunchPackTransposed(DataType src_type, const void* src, int64_t rows,
                                  int64_t cols, int64_t ld_src, int64_t stride_src,
                                  int64_t items, DataType dst_type, void* dst, int64_t ld_dst,
                                  int64_t stride_dst, cudaStream_t stream);

// c[b, i, j] = alpha * sum_s partial[b, s, i, j] + beta * c_in[b, i, j] for b < batch,
// with partial dense [batch, splits, m, n]. Defined in splitk_reduce.cu.
absl::Status LaunchSplitKReduce(const float* partial, int splits, int64_t m, int64_t n,
                                int64_t batch, float alpha, float beta, const float* c_in,
                                int64_t stride_c_in, float* c, int64_t stride_c,
                                cudaStream_t stream);

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_DENSE_TILED_GEMM_H_
