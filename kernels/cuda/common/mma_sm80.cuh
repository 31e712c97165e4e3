// Warp-level tensor-core building blocks for the hand-written mma.sync kernels
// (quant_square_*.cu): ldmatrix and the mma.sync shapes they use (cp.async:
// cp_async.cuh).
// sm_80+ instructions (.cu files only; callers trap below sm_80).
#ifndef GEMMD_KERNELS_CUDA_COMMON_MMA_SM80_CUH_
#define GEMMD_KERNELS_CUDA_COMMON_MMA_SM80_CUH_

#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"

namespace gemmd::gpu::internal {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices (8 rows of 16 bytes each); lane l gives the row address of
// matrix l / 8, row l % 8, and receives one 32-bit word of each matrix.
__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], const void* smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem_row)));
}

// D += A (16x32 s8, row) * B (32x8 s8, col), int32 accumulation (exact).
__device__ __forceinline__ void MmaS8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                      uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D += A (16x16 f16, row) * B (16x8 f16, col), FP32 accumulation.
__device__ __forceinline__ void MmaF16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_MMA_SM80_CUH_
