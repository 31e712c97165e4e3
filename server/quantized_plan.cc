#include "server/quantized_plan.h"

namespace gemmd {

const char* QuantizedPathName(QuantizedPath path) {
  switch (path) {
    case QuantizedPath::kHostDequantize:
      return "host_dequantize";
    case QuantizedPath::kSkinny:
      return "skinny";
    case QuantizedPath::kSquare:
      return "square";
    case QuantizedPath::kSquareFp16A:
      return "square_fp16_a";
  }
  return "unknown";
}

QuantizedPath PlanQuantized(const QuantizedOperands& q) {
  const bool dense_a_ok = q.a.has_value() || q.a_dense_type == DataType::kFloat16 ||
                          q.a_dense_type == DataType::kFloat32;
  if (q.m <= kSkinnyPreferredMaxM && dense_a_ok) return QuantizedPath::kSkinny;
  const int64_t k_multiple = q.b.format == QuantFormat::kInt8 ? 16 : 32;
  if (q.k % k_multiple == 0) {
    if (q.a.has_value() && q.a->format == q.b.format) return QuantizedPath::kSquare;
    if (!q.a.has_value() && q.a_dense_type == DataType::kFloat16 &&
        q.b.format == QuantFormat::kNvfp4) {
      return QuantizedPath::kSquareFp16A;
    }
  }
  if (q.m <= kSkinnyMaxM && dense_a_ok) return QuantizedPath::kSkinny;
  return QuantizedPath::kHostDequantize;
}

}  // namespace gemmd
