#include "kernels/quantized_operands.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gemmd {

absl::Status DequantizeOperand(const QuantizedOperand& op, int64_t rows, int64_t k, float* out) {
  if (op.layout != WeightLayout::kCanonical) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the operand is in the ", WeightLayoutName(op.layout), " layout; this reads canonical"));
  }
  if (op.format == QuantFormat::kInt8) {
    // The scales sit in a bytes field with no alignment promise: copy them out.
    std::vector<float> scales(static_cast<size_t>(rows));
    std::memcpy(scales.data(), op.scales.data(), scales.size() * sizeof(float));
    DequantizeInt8(reinterpret_cast<const int8_t*>(op.data.data()), scales.data(), rows, k, out);
    return absl::OkStatus();
  }
  return DequantizeNvfp4(reinterpret_cast<const uint8_t*>(op.data.data()),
                         reinterpret_cast<const uint8_t*>(op.scales.data()), op.tensor_scale,
                         rows, k, out);
}

}  // namespace gemmd
