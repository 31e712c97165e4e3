// Which GPU kernel family serves a QuantizedMatmul (packed operands, kernels/quant_formats.h), or
// whether the server dequantizes on the host instead. Pure logic, so it is tested
// without a GPU; the kernels' own constraints are in kernels/cuda/quant_gemm.h and
// quant_square.h.
#ifndef GEMMD_SERVER_QUANTIZED_PLAN_H_
#define GEMMD_SERVER_QUANTIZED_PLAN_H_

#include <cstdint>

#include "absl/status/status.h"

#include "server/quantized_operands.h"

namespace gemmd {

enum class QuantizedPath {
  kHostDequantize,  // dequantize to FP32 on the host, then the FP32 GEMM path
  kSkinny,          // weight-only skinny kernel (dense A; a quantized A is dequantized first)
  kSquare,          // both operands quantized in one format
  kSquareFp16A,     // dense FP16 A against NVFP4 B
};

const char* QuantizedPathName(QuantizedPath path);

// OK when `path`'s kernels take these operands, else FAILED_PRECONDITION saying why
// (for a forced kernel). kHostDequantize takes everything.
absl::Status QuantizedPathTakes(QuantizedPath path, const QuantizedOperands& q);

// The skinny kernel streams B once at memory speed: it wins up to M = 16 whatever A is
// (a quantized A, at most 16 rows, is dequantized on the host first), and FP16 A against
// NVFP4 B up to its limit (64): H200, 2026-12-01, 24-64 x 8192^2, 0.026-0.041 ms on its
// streaming path against 0.196 on the square FP16 x NVFP4 kernel, whose 128-row tiles are
// mostly empty there; where the streaming path cannot run (K % 64 != 0, too little shared
// memory) its register path still took 0.050 / 0.102 ms at 32 / 64 rows. Larger M goes
// to the square (tensor-core) kernels when they take the operands: same format on both
// sides or FP16 x NVFP4, with the K alignment they need (INT8 K % 16, NVFP4 K % 32). Up to
// the skinny limit the skinny kernel takes the rest (FP16, FP32 or BF16 activations, or a
// quantized A); beyond it the host dequantizes.
inline constexpr int64_t kSkinnyPreferredMaxM = 16;
inline constexpr int64_t kSkinnyMaxM = 64;
QuantizedPath PlanQuantized(const QuantizedOperands& q);

}  // namespace gemmd

#endif  // GEMMD_SERVER_QUANTIZED_PLAN_H_
