// What the sm_90 DGEMM kernels (dgemm_dmma_sm90.cu, dgemm_dmma_tma_sm90.cu) share: the
// m16n8k8 FP64 DMMA and the store of a warp's accumulator tiles into C.
#ifndef GEMMD_KERNELS_CUDA_DENSE_DMMA_M16N8K8_CUH_
#define GEMMD_KERNELS_CUDA_DENSE_DMMA_M16N8K8_CUH_

#include <cstdint>

#include "kernels/cuda/dense/dgemm_dmma.h"

namespace gemmd::gpu::internal {

// d += a * b, one DMMA (PTX ISA, mma.m16n8k8 .f64, sm_90).
__device__ __forceinline__ void Dmma(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
      "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#endif
}

// C = alpha * acc + beta * C_in for a warp's kTilesM x kTilesN tiles of 16 x 8 whose first
// element is (row0, col0) of item `item`, bounds-checked. Lane (g, t) holds rows g and
// g + 8, columns 2t and 2t + 1 of each tile.
template <int kTilesM, int kTilesN>
__device__ __forceinline__ void StoreDmmaTiles(const DgemmArgs& p, int item, int row0, int col0,
                                               int g, int t,
                                               const double (&acc)[kTilesM][kTilesN][4]) {
  double* c = p.c + item * p.stride_c;
  const double* c_in = p.beta != 0.0 ? p.c_in + item * p.stride_c_in : nullptr;
#pragma unroll
  for (int mi = 0; mi < kTilesM; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + mi * 16 + g + 8 * half;
      if (row >= p.m) continue;
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = col0 + j * 8 + 2 * t + e;
          if (col >= p.n) continue;
          const int64_t at = static_cast<int64_t>(row) * p.ldc + col;
          double v = p.alpha * acc[mi][j][2 * half + e];
          if (c_in != nullptr) v += p.beta * c_in[at];
          c[at] = v;
        }
      }
    }
  }
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_DENSE_DMMA_M16N8K8_CUH_
