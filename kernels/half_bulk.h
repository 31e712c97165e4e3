// Bulk FP16 conversions for the CPU backend's hot loops: F16C instructions where the CPU
// has them (checked once at run time), the scalar functions of half.h otherwise. Both
// paths give bit-identical results (round-to-nearest-even; NaN stays NaN). Thread-safe.
#ifndef GEMMD_KERNELS_HALF_BULK_H_
#define GEMMD_KERNELS_HALF_BULK_H_

#include <cstdint>

namespace gemmd {

// dst[i] = float(half(src[i])): what the FP16 tensor path does to FP32 inputs.
void RoundToHalfBulk(const float* src, int64_t count, float* dst);

// dst[i] = float(src[i]) for FP16 bit patterns.
void HalfToFloatBulk(const uint16_t* src, int64_t count, float* dst);

// Whether the F16C path is in use on this CPU.
bool HalfBulkUsesF16c();

}  // namespace gemmd

#endif  // GEMMD_KERNELS_HALF_BULK_H_
