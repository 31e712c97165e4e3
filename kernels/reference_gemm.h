// FP64 reference GEMM on the host: the yardstick every backend and kernel is tested
// against (docs/ARCHITECTURE.md, "Numerics"). It reads the operands exactly as stored (so the FP16
// tensor path's rounding of FP32 inputs counts as error) and accumulates in double (FLOAT64
// operands: in long double, rounded to double once).
// Thread-safe and simple on purpose: one row's sums in order, whatever thread runs it.
// ReferenceGemm gives large problems' rows to up to 16 threads (the same results).
#ifndef GEMMD_KERNELS_REFERENCE_GEMM_H_
#define GEMMD_KERNELS_REFERENCE_GEMM_H_

#include <cstdint>
#include <vector>

#include "kernels/gemm_problem.h"

namespace gemmd {

// Element `index` of a buffer of `type`, widened to double.
double LoadAsDouble(const void* data, DataType type, int64_t index);

// Rows [row_begin, row_end) of batch item `batch_index`: writes (row_end-row_begin)*n
// doubles to `out`, row-major. Lets large problems be checked on sampled rows.
void ReferenceGemmRows(const GemmProblem& problem, const GemmOperands& operands,
                       int64_t batch_index, int64_t row_begin, int64_t row_end, double* out);

// The whole problem: batch*m*n doubles, dense [batch, m, n].
std::vector<double> ReferenceGemm(const GemmProblem& problem, const GemmOperands& operands);

// ||actual - ref||_F / ||ref||_F over `count` elements; `actual` holds `type` elements.
// Returns 0 when both are all zero, +inf when ref is zero and actual is not, and NaN
// when actual holds a NaN.
double RelativeError(const double* ref, const void* actual, DataType type, int64_t count);

}  // namespace gemmd

#endif  // GEMMD_KERNELS_REFERENCE_GEMM_H_
