// Operand packer: converts and/or re-lays out a strided batch of matrices into the form
// the tile kernels read with 16-byte loads (operand type, rows padded with zeros to a
// multiple of 16 bytes, 16-byte aligned). It serves three cases:
//   * FP32 inputs on the FP16 tensor path (round to nearest even, one pass: read 4 B,
//     write 2 B per element). It is the whole difference between the FP32-input and
//     FP16-input rows of gemm-bench (docs/KERNELS.md has the H200 numbers).
//   * FP16/BF16 inputs on the FP32 SIMT path (exact widening).
//   * operands whose rows or base pointer are not 16-byte aligned (odd K, offsets).
//   * transposed copies for tiles that read K-major operands only (the wgmma tiles),
//     through 32x32 shared-memory tiles so both sides stay coalesced.
// Memory-bound; each thread writes one 16-byte group of outputs (the transposing pass:
// one element per thread and step).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

template <typename T, int N>
struct alignas(sizeof(T) * N) VecOf {
  T v[N];
};

// Block (32, 8): x walks the 16-byte output groups of a row, y the rows, z the items;
// all loops stride, so any size fits the grid limits, and no 64-bit division is needed
// (one per element made this pass compute-bound, docs/KERNELS.md).
template <typename Src, typename Dst>
__global__ void __launch_bounds__(256) PackKernel(const Src* __restrict__ src, int64_t rows,
                                                  int64_t cols, int64_t ld_src,
                                                  int64_t stride_src, int64_t items,
                                                  Dst* __restrict__ dst, int64_t ld_dst,
                                                  int64_t stride_dst, bool src_vec) {
  constexpr int kGroup = 16 / sizeof(Dst);
  const int64_t groups_per_row = ld_dst / kGroup;
  for (int64_t item = blockIdx.z; item < items; item += gridDim.z) {
    for (int64_t row = blockIdx.y * int64_t{blockDim.y} + threadIdx.y; row < rows;
         row += int64_t{gridDim.y} * blockDim.y) {
      const Src* s_row = src + item * stride_src + row * ld_src;
      Dst* d_row = dst + item * stride_dst + row * ld_dst;
      for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups_per_row;
           g += int64_t{gridDim.x} * blockDim.x) {
        const int64_t col = g * kGroup;
        const Src* s = s_row + col;
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
        *reinterpret_cast<VecOf<Dst, kGroup>*>(d_row + col) = out;
      }
    }
  }
}

// The common case, a dense operand with no padding (ld_src == ld_dst == cols, items
// back to back): one flat conversion. Each thread keeps kUnroll 16-byte groups in flight
// before storing any, which is what a bandwidth-bound pass needs.
template <typename Src, typename Dst>
__global__ void __launch_bounds__(256)
    PackFlatKernel(const Src* __restrict__ src, Dst* __restrict__ dst, int64_t groups) {
  constexpr int kGroup = 16 / sizeof(Dst);
  constexpr int kUnroll = 4;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t g0 = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g0 < groups;
       g0 += stride * kUnroll) {
    VecOf<Src, kGroup> in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = g0 + u * stride;
      if (g < groups) in[u] = reinterpret_cast<const VecOf<Src, kGroup>*>(src)[g];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = g0 + u * stride;
      if (g < groups) {
        VecOf<Dst, kGroup> out;
#pragma unroll
        for (int e = 0; e < kGroup; ++e) out.v[e] = FromFloat<Dst>(ToFloat<Src>(in[u].v[e]));
        reinterpret_cast<VecOf<Dst, kGroup>*>(dst)[g] = out;
      }
    }
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
  if (items == 0 || rows == 0 || ld_dst == 0) return absl::OkStatus();
  const bool dense = src_vec && ld_src == cols && ld_dst == cols &&
                     (items <= 1 || (stride_src == rows * cols && stride_dst == rows * cols));
  if (dense) {
    const int64_t groups = items * rows * cols / kGroup;
    const int64_t blocks = std::min<int64_t>((groups + 1023) / 1024, 4096);
    PackFlatKernel<Src, Dst><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        static_cast<const Src*>(src), static_cast<Dst*>(dst), groups);
    RETURN_IF_CUDA_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  const dim3 block(32, 8);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((ld_dst / kGroup + 31) / 32, 1024)),
                  static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(items, 65535)));
  PackKernel<Src, Dst><<<grid, block, 0, stream>>>(
      static_cast<const Src*>(src), rows, cols, ld_src, stride_src, items,
      static_cast<Dst*>(dst), ld_dst, stride_dst, src_vec);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// dst[item][c][r] = src[item][r][c] for r < rows, c < cols; dst[item][c][r] = 0 for
// rows <= r < ld_dst. Block (32, 8) moves a 32x32 tile through shared memory (padded by
// one column against bank conflicts); grid.z walks the items.
template <typename Src, typename Dst>
__global__ void __launch_bounds__(256) PackTransposedKernel(
    const Src* __restrict__ src, int64_t rows, int64_t cols, int64_t ld_src,
    int64_t stride_src, int64_t items, Dst* __restrict__ dst, int64_t ld_dst,
    int64_t stride_dst) {
  __shared__ float tile[32][33];
  const int64_t tiles_r = (ld_dst + 31) / 32;  // along dst's rows' length (src rows)
  const int64_t tiles_c = (cols + 31) / 32;
  for (int64_t item = blockIdx.z; item < items; item += gridDim.z) {
    for (int64_t t = blockIdx.x; t < tiles_r * tiles_c; t += gridDim.x) {
      const int64_t r0 = (t % tiles_r) * 32, c0 = (t / tiles_r) * 32;
      const Src* s = src + item * stride_src;
      for (int i = threadIdx.y; i < 32; i += 8) {
        const int64_t r = r0 + i, c = c0 + threadIdx.x;
        tile[i][threadIdx.x] = r < rows && c < cols ? ToFloat<Src>(s[r * ld_src + c]) : 0.0f;
      }
      __syncthreads();
      Dst* d = dst + item * stride_dst;
      for (int i = threadIdx.y; i < 32; i += 8) {
        const int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (c < cols && r < ld_dst) d[c * ld_dst + r] = FromFloat<Dst>(tile[threadIdx.x][i]);
      }
      __syncthreads();
    }
  }
}

template <typename Src, typename Dst>
absl::Status PackTransposed(const void* src, int64_t rows, int64_t cols, int64_t ld_src,
                            int64_t stride_src, int64_t items, void* dst, int64_t ld_dst,
                            int64_t stride_dst, cudaStream_t stream) {
  if (ld_dst < rows) {
    return absl::InternalError(absl::StrCat("pack: bad transposed layout ld=", ld_dst));
  }
  if (items == 0 || rows == 0 || cols == 0) return absl::OkStatus();
  const int64_t tiles = ((ld_dst + 31) / 32) * ((cols + 31) / 32);
  const dim3 block(32, 8);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles, 1 << 20)), 1,
                  static_cast<unsigned>(std::min<int64_t>(items, 65535)));
  PackTransposedKernel<Src, Dst><<<grid, block, 0, stream>>>(
      static_cast<const Src*>(src), rows, cols, ld_src, stride_src, items,
      static_cast<Dst*>(dst), ld_dst, stride_dst);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// Runs Packer<Src, Dst>::Run for the element types named at run time.
template <template <typename, typename> class Packer, typename... Args>
absl::Status Dispatch(DataType src_type, DataType dst_type, Args... args) {
  using F32 = float;
  using F16 = __half;
  using BF16 = __nv_bfloat16;
  if (dst_type == DataType::kFloat32) {
    if (src_type == DataType::kFloat32) return Packer<F32, F32>::Run(args...);
    if (src_type == DataType::kFloat16) return Packer<F16, F32>::Run(args...);
    if (src_type == DataType::kBFloat16) return Packer<BF16, F32>::Run(args...);
  } else if (dst_type == DataType::kFloat16) {
    if (src_type == DataType::kFloat32) return Packer<F32, F16>::Run(args...);
    if (src_type == DataType::kFloat16) return Packer<F16, F16>::Run(args...);
  } else if (dst_type == DataType::kBFloat16) {
    if (src_type == DataType::kFloat32) return Packer<F32, BF16>::Run(args...);
    if (src_type == DataType::kBFloat16) return Packer<BF16, BF16>::Run(args...);
  }
  return absl::InternalError(absl::StrCat("pack: no conversion from ",
                                          Sv(DataTypeName(src_type)), " to ",
                                          Sv(DataTypeName(dst_type))));
}

template <typename Src, typename Dst>
struct Straight {
  template <typename... Args>
  static absl::Status Run(Args... args) {
    return Pack<Src, Dst>(args...);
  }
};
template <typename Src, typename Dst>
struct Transposed {
  template <typename... Args>
  static absl::Status Run(Args... args) {
    return PackTransposed<Src, Dst>(args...);
  }
};

}  // namespace

absl::Status LaunchPackTransposed(DataType src_type, const void* src, int64_t rows,
                                  int64_t cols, int64_t ld_src, int64_t stride_src,
                                  int64_t items, DataType dst_type, void* dst, int64_t ld_dst,
                                  int64_t stride_dst, cudaStream_t stream) {
  return Dispatch<Transposed>(src_type, dst_type, src, rows, cols, ld_src, stride_src, items,
                              dst, ld_dst, stride_dst, stream);
}

absl::Status LaunchPack(DataType src_type, const void* src, int64_t rows, int64_t cols,
                        int64_t ld_src, int64_t stride_src, int64_t items,
                        DataType dst_type, void* dst, int64_t ld_dst, int64_t stride_dst,
                        cudaStream_t stream) {
  return Dispatch<Straight>(src_type, dst_type, src, rows, cols, ld_src, stride_src, items, dst,
                           ld_dst, stride_dst, stream);
}

}  // namespace gemmd::gpu::internal

namespace gemmd::gpu {

absl::Status LaunchConvert(DataType src_type, const void* src, DataType dst_type, void* dst,
                           int64_t count, cudaStream_t stream) {
  if (count <= 0) return absl::OkStatus();
  // One flat row; Pack writes whole 16-byte groups, hence the rounded destination.
  const int64_t group = 16 / static_cast<int64_t>(DataTypeSize(dst_type));
  const int64_t ld_dst = (count + group - 1) / group * group;
  return internal::LaunchPack(src_type, src, /*rows=*/1, count, /*ld_src=*/count,
                              /*stride_src=*/0, /*items=*/1, dst_type, dst, ld_dst,
                              /*stride_dst=*/0, stream);
}

}  // namespace gemmd::gpu
