// Operand packer: converts and/or re-lays out a strided batch of matrices into the form
// the tile kernels read with 16-byte loads (operand type, rows padded with zeros to a
// multiple of 16 bytes, 16-byte aligned). It serves three cases:
//   * FP32 inputs on the FP16 tensor path (round to nearest even, one pass: read 4 B,
//     write 2 B per element). Measured on the H200 (gemm-bench, see docs/KERNELS.md):
//     this pass is the whole difference between the FP32-input and FP16-input rows.
//   * FP16/BF16 inputs on the FP32 SIMT path (exact widening).
//   * operands whose rows or base pointer are not 16-byte aligned (odd K, offsets).
// Memory-bound; each thread writes one 16-byte group of outputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

template <typename T, int N>
struct alignas(sizeof(T) * N) VecOf {
  T v[N];
};

template <typename Src, typename Dst>
__global__ void __launch_bounds__(256) PackKernel(const Src* __restrict__ src, int64_t rows,
                                                  int64_t cols, int64_t ld_src,
                                                  int64_t stride_src, int64_t items,
                                                  Dst* __restrict__ dst, int64_t ld_dst,
                                                  int64_t stride_dst, bool src_vec) {
  constexpr int kGroup = 16 / sizeof(Dst);
  const int64_t groups_per_row = ld_dst / kGroup;
  const int64_t total = items * rows * groups_per_row;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < total;
       g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t col = (g % groups_per_row) * kGroup;
    const int64_t row_global = g / groups_per_row;
    const int64_t item = row_global / rows;
    const int64_t row = row_global - item * rows;
    const Src* s = src + item * stride_src + row * ld_src + col;
    VecOf<Dst, kGroup> out;
    if (src_vec && col + kGroup <= cols) {
      const VecOf<Src, kGroup> in = *reinterpret_cast<const VecOf<Src, kGroup>*>(s);
#pragma unroll
      for (int e = 0; e < kGroup; ++e) out.v[e] = FromFloat<Dst>(ToFloat<Src>(in.v[e]));
    } else {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        out.v[e] = FromFloat<Dst>(col + e < cols ? ToFloat<Src>(s[e]) : 0.0f);
      }
    }
    *reinterpret_cast<VecOf<Dst, kGroup>*>(dst + item * stride_dst + row * ld_dst + col) =
        out;
  }
}

template <typename Src, typename Dst>
absl::Status Pack(const void* src, int64_t rows, int64_t cols, int64_t ld_src,
                  int64_t stride_src, int64_t items, void* dst, int64_t ld_dst,
                  int64_t stride_dst, cudaStream_t stream) {
  constexpr int kGroup = 16 / sizeof(Dst);
  if (ld_dst % kGroup != 0 || ld_dst < cols ||
      reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    return absl::InternalError(absl::StrCat("pack: bad destination layout ld=", ld_dst));
  }
  const bool src_vec = reinterpret_cast<uintptr_t>(src) % (sizeof(Src) * kGroup) == 0 &&
                       ld_src % kGroup == 0 && (items <= 1 || stride_src % kGroup == 0);
  const int64_t total = items * rows * (ld_dst / kGroup);
  if (total == 0) return absl::OkStatus();
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t{1} << 20);
  PackKernel<Src, Dst><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      static_cast<const Src*>(src), rows, cols, ld_src, stride_src, items,
      static_cast<Dst*>(dst), ld_dst, stride_dst, src_vec);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchPack(DataType src_type, const void* src, int64_t rows, int64_t cols,
                        int64_t ld_src, int64_t stride_src, int64_t items,
                        DataType dst_type, void* dst, int64_t ld_dst, int64_t stride_dst,
                        cudaStream_t stream) {
  using F32 = float;
  using F16 = __half;
  using BF16 = __nv_bfloat16;
  const auto args = [&](auto f) {
    return f(src, rows, cols, ld_src, stride_src, items, dst, ld_dst, stride_dst, stream);
  };
  if (dst_type == DataType::kFloat32) {
    if (src_type == DataType::kFloat32) return args(Pack<F32, F32>);
    if (src_type == DataType::kFloat16) return args(Pack<F16, F32>);
    if (src_type == DataType::kBFloat16) return args(Pack<BF16, F32>);
  } else if (dst_type == DataType::kFloat16) {
    if (src_type == DataType::kFloat32) return args(Pack<F32, F16>);
    if (src_type == DataType::kFloat16) return args(Pack<F16, F16>);
  } else if (dst_type == DataType::kBFloat16) {
    if (src_type == DataType::kBFloat16) return args(Pack<BF16, BF16>);
  }
  return absl::InternalError(absl::StrCat("pack: no conversion from ",
                                          Sv(DataTypeName(src_type)), " to ",
                                          Sv(DataTypeName(dst_type))));
}

}  // namespace gemmd::gpu::internal
