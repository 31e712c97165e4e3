#include "server/store/tensor_spec.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gemmd {
namespace {

constexpr int64_t kAlign = 256;

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::Status ValidateSpec(const TensorSpec& spec) {
  const size_t rank = spec.shape.size();
  if (spec.quantized ? rank != 2 : (rank != 2 && rank != 3)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header.shape ", ShapeText(spec.shape), " has rank ", rank, "; expected ",
        spec.quantized ? "[rows, K] for a quantized tensor" : "[rows, cols] or [batch, rows, cols]"));
  }
  int64_t elements = 1;
  for (int64_t d : spec.shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(absl::StrCat("header.shape ", ShapeText(spec.shape),
                                                     " has a dimension < 1; all must be >= 1"));
    }
    if (__builtin_mul_overflow(elements, d, &elements) || elements > kMaxTensorBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.shape ", ShapeText(spec.shape), " has more than ", kMaxTensorBytes,
          " elements; a resident tensor may have at most that many"));
    }
  }
  if (!spec.quantized) {
    if (elements > kMaxTensorBytes / 8) {
      return absl::InvalidArgumentError(absl::StrCat("header.shape ", ShapeText(spec.shape),
                                                     " is larger than a resident tensor may be (",
                                                     kMaxTensorBytes, " bytes)"));
    }
    return absl::OkStatus();
  }
  if (spec.format == QuantFormat::kNvfp4) {
    if (spec.shape[1] % kNvfp4BlockSize != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NVFP4 needs K to be a multiple of 16 (one scale per 16 values); K is ", spec.shape[1]));
    }
    if (!std::isfinite(spec.tensor_scale) || !(spec.tensor_scale > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.tensor_scale is ", spec.tensor_scale, "; NVFP4 needs a finite scale > 0"));
    }
  }
  return absl::OkStatus();
}

int64_t Rows(const TensorSpec& spec) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < spec.shape.size(); ++i) rows *= spec.shape[i];
  return rows;
}

int64_t RowDataBytes(const TensorSpec& spec) {
  const int64_t cols = spec.shape.back();
  if (!spec.quantized) return cols * static_cast<int64_t>(DataTypeSize(spec.dtype));
  return spec.format == QuantFormat::kInt8 ? cols : cols / 2;
}

int64_t RowScaleBytes(const TensorSpec& spec) {
  if (!spec.quantized) return 0;
  return spec.format == QuantFormat::kInt8 ? 4 : spec.shape.back() / kNvfp4BlockSize;
}

int64_t DataBytes(const TensorSpec& spec) { return Rows(spec) * RowDataBytes(spec); }
int64_t ScaleBytes(const TensorSpec& spec) { return Rows(spec) * RowScaleBytes(spec); }

int64_t ScalesOffset(const TensorSpec& spec) {
  return (DataBytes(spec) + kAlign - 1) / kAlign * kAlign;
}

int64_t StoredBytes(const TensorSpec& spec) {
  return ScaleBytes(spec) > 0 ? ScalesOffset(spec) + ScaleBytes(spec) : DataBytes(spec);
}

std::string SpecText(const TensorSpec& spec) {
  return absl::StrCat(spec.quantized ? QuantFormatName(spec.format) : DataTypeName(spec.dtype),
                      " ", ShapeText(spec.shape));
}

absl::Status ScaleChecker::Check(absl::string_view bytes) {
  const int64_t k = spec_.shape.empty() ? 0 : spec_.shape.back();
  if (spec_.format == QuantFormat::kNvfp4) {
    absl::Status s = CheckScaleBytes(spec_.format, bytes.data(),
                                     static_cast<int64_t>(bytes.size()), k, next_);
    next_ += static_cast<int64_t>(bytes.size());
    return s;
  }
  // INT8: whole floats only; a float split between pieces waits in carry_.
  while (carried_ > 0 && carried_ < 4 && !bytes.empty()) {
    carry_[carried_++] = bytes.front();
    bytes.remove_prefix(1);
  }
  if (carried_ == 4) {
    if (absl::Status s = CheckScaleBytes(spec_.format, carry_, 4, k, next_ / 4); !s.ok()) return s;
    next_ += 4;
    carried_ = 0;
  }
  const size_t whole = bytes.size() / 4 * 4;
  absl::Status s =
      CheckScaleBytes(spec_.format, bytes.data(), static_cast<int64_t>(whole), k, next_ / 4);
  next_ += static_cast<int64_t>(whole);
  for (size_t i = whole; i < bytes.size(); ++i) carry_[carried_++] = bytes[i];
  return s;
}

}  // namespace gemmd
