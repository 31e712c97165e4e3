#include "server/quantized_plan.h"

#include "absl/strings/str_cat.h"

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

absl::Status QuantizedPathTakes(QuantizedPath path, const QuantizedOperands& q) {
  const int64_t k_multiple = q.b.format == QuantFormat::kInt8 ? 16 : 32;
  switch (path) {
    case QuantizedPath::kHostDequantize:
      return absl::OkStatus();
    case QuantizedPath::kSkinny:
      if (q.m > kSkinnyMaxM) {
        return absl::FailedPreconditionError(
            absl::StrCat("the skinny kernel takes M <= ", kSkinnyMaxM, "; M is ", q.m));
      }
      if (!q.a.has_value() && q.a_dense_type != DataType::kFloat16 &&
          q.a_dense_type != DataType::kFloat32 && q.a_dense_type != DataType::kBFloat16) {
        return absl::FailedPreconditionError(
            "the skinny kernel takes FLOAT16, FLOAT32 or BFLOAT16 activations (or a quantized "
            "A)");
      }
      return absl::OkStatus();
    case QuantizedPath::kSquare:
      if (!q.a.has_value() || q.a->format != q.b.format) {
        return absl::FailedPreconditionError(
            "the square kernel takes A and B quantized in the same format");
      }
      break;
    case QuantizedPath::kSquareFp16A:
      if (q.a.has_value() || q.a_dense_type != DataType::kFloat16 ||
          q.b.format != QuantFormat::kNvfp4) {
        return absl::FailedPreconditionError(
            "the FP16 x NVFP4 kernel takes a dense FLOAT16 A and an NVFP4 B");
      }
      break;
  }
  if (q.k % k_multiple != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the square ", QuantFormatName(q.b.format), " kernels take K % ", k_multiple,
        " == 0; K is ", q.k));
  }
  return absl::OkStatus();
}

QuantizedPath PlanQuantized(const QuantizedOperands& q) {
  auto takes = [&](QuantizedPath p) { return QuantizedPathTakes(p, q).ok(); };
  if (q.m <= kSkinnyPreferredMaxM && takes(QuantizedPath::kSkinny)) return QuantizedPath::kSkinny;
  const bool fp16_x_nvfp4 = !q.a.has_value() && q.a_dense_type == DataType::kFloat16 &&
                            q.b.format == QuantFormat::kNvfp4;
  if (fp16_x_nvfp4 && takes(QuantizedPath::kSkinny)) return QuantizedPath::kSkinny;
  if (takes(QuantizedPath::kSquare)) return QuantizedPath::kSquare;
  if (takes(QuantizedPath::kSquareFp16A)) return QuantizedPath::kSquareFp16A;
  if (takes(QuantizedPath::kSkinny)) return QuantizedPath::kSkinny;
  return QuantizedPath::kHostDequantize;
}

}  // namespace gemmd
