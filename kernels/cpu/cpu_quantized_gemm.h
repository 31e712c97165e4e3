// The CPU backend's weight-only quantized GEMM: C[m, n] = A[m, k] * dequant(B)[n, k]^T
// with A dense and B packed as on the wire (kernels/quant_formats.h), FP32 result.
//
// How: B is dequantized a tile of rows at a time into a small FP32 buffer (a few MB, so
// it stays in cache) and each tile goes to OpenBLAS (cblas_sgemm) straight into its
// columns of C. Dequantizing all of B first, as the server used to, wrote and re-read
// 4 bytes per weight (268 MB for 8192 x 8192) through fresh memory: on a 2-core machine
// that took 4-6 times the GEMM itself. The values are the same (e2m1 * e4m3 * tensor
// scale and int8 * row scale are computed exactly as DequantizeNvfp4 / DequantizeInt8
// do), so results match the dequantize-then-SGEMM path to within SGEMM's summation order.
#ifndef GEMMD_KERNELS_CPU_CPU_QUANTIZED_GEMM_H_
#define GEMMD_KERNELS_CPU_CPU_QUANTIZED_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"

namespace gemmd {

// The CPU backend's name for it (ServerInfo.quantized_kernels, responses).
inline constexpr char kCpuWeightOnlyKernel[] = "cpu_weight_only_sgemm_openblas";

// Writes all of c (row-major [m, n]). `a` is [m, k] row-major of a_type FLOAT32, FLOAT16
// or BFLOAT16 (any alignment). INVALID_ARGUMENT for other types, non-positive or
// over-32-bit dimensions, NVFP4 with K % 16 != 0, and NaN E4M3 scale bytes.
absl::Status CpuWeightOnlyGemm(const void* a, DataType a_type, int64_t m, const PackedWeight& b,
                               float* c);

}  // namespace gemmd

#endif  // GEMMD_KERNELS_CPU_CPU_QUANTIZED_GEMM_H_
