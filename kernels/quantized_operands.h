// The operands of a QuantizedMatmul as they came on the wire: packed codes and scales,
// never dequantized on the host by the quantized kernels. They point into the request,
// which outlives the work. The quantized kernels' catalogues (kernels/cpu/cpu_kernels.h,
// kernels/cuda/quantized/quantized_kernels.h) decide from their shape and formats which kernel
// takes them.
#ifndef GEMMD_KERNELS_QUANTIZED_OPERANDS_H_
#define GEMMD_KERNELS_QUANTIZED_OPERANDS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"
#include "kernels/quant_prepack.h"

namespace gemmd {

// One quantized tensor [rows, K] (kernels/quant_formats.h).
struct QuantizedOperand {
  QuantFormat format = QuantFormat::kInt8;
  absl::string_view data;    // INT8: rows*K bytes; NVFP4: rows*K/2 bytes
  absl::string_view scales;  // INT8: rows float32; NVFP4: rows*K/16 E4M3 bytes
  float tensor_scale = 1.0f;
  // How data and scales are laid out (kernels/quant_prepack.h): canonical as on the wire;
  // swap-AB only for a resident weight in device memory that the store re-laid out.
  WeightLayout layout = WeightLayout::kCanonical;
};

// C[m, n] = dequant(A)[m, k] * dequant(B)[n, k]^T, FP32.
struct QuantizedOperands {
  int64_t m = 0, n = 0, k = 0;
  std::optional<QuantizedOperand> a;  // nullopt: A is dense (weight-only quantization)
  DataType a_dense_type = DataType::kFloat32;
  absl::string_view a_dense;  // [m, k] of a_dense_type when `a` is nullopt
  QuantizedOperand b;
};

// One quantized operand [rows, k] as FP32 (out: rows*k floats), for a kernel that takes
// its operand dense. INVALID_ARGUMENT for a NaN E4M3 scale byte, FAILED_PRECONDITION for
// an operand not in the canonical layout.
absl::Status DequantizeOperand(const QuantizedOperand& op, int64_t rows, int64_t k, float* out);

}  // namespace gemmd

#endif  // GEMMD_KERNELS_QUANTIZED_OPERANDS_H_
