#include "server/rpc/quantized_validation.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "server/observability/client_text.h"

namespace gemmd {
namespace {

// [rows, K] with both dims >= 1 and rows*K within max_elements.
absl::Status CheckShape(const google::protobuf::RepeatedField<int64_t>& shape,
                        absl::string_view name, const ValidationLimits& limits) {
  if (shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeString(shape),
                                                   " has rank ", shape.size(),
                                                   "; expected [rows, K]"));
  }
  if (shape[0] <= 0 || shape[1] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeString(shape),
                                                   " has a dimension <= 0; all must be >= 1"));
  }
  int64_t elements = 0;
  if (__builtin_mul_overflow(shape[0], shape[1], &elements) || elements > limits.max_elements) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ".shape ", ShapeString(shape), " has more than ", limits.max_elements,
        " elements; this server accepts at most that many per operand (--max_elements)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuantFormat> CheckQuantized(const gemm::v1::QuantizedTensor& t,
                                           absl::string_view data, absl::string_view scales,
                                           absl::string_view name,
                                           const ValidationLimits& limits, bool check_scales) {
  if (absl::Status s = CheckShape(t.shape(), name, limits); !s.ok()) return s;
  const int64_t rows = t.shape(0), k = t.shape(1);
  QuantFormat format;
  int64_t data_bytes = 0, scale_bytes = 0;
  switch (t.format()) {
    case gemm::v1::QUANT_FORMAT_INT8:
      format = QuantFormat::kInt8;
      data_bytes = rows * k;
      scale_bytes = rows * 4;
      break;
    case gemm::v1::QUANT_FORMAT_NVFP4:
      format = QuantFormat::kNvfp4;
      if (k % kNvfp4BlockSize != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": NVFP4 needs K to be a multiple of 16 (one scale per 16 values); K is ", k,
            ": pad K with zeros to ", (k + 15) / 16 * 16));
      }
      data_bytes = rows * k / 2;
      scale_bytes = rows * k / kNvfp4BlockSize;
      break;
    case gemm::v1::QUANT_FORMAT_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".format is unset; expected INT8 or NVFP4"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(name, ".format ", t.format(), " is not a QuantFormat; expected INT8 or "
                                                     "NVFP4"));
  }
  const char* format_name = QuantFormatName(format);
  if (static_cast<int64_t>(data.size()) != data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".data has ", data.size(),
                                                   " bytes; ", format_name, " ",
                                                   ShapeString(t.shape()), " needs ",
                                                   data_bytes));
  }
  if (static_cast<int64_t>(scales.size()) != scale_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".scales has ", scales.size(), " bytes; ", format_name, " ",
        ShapeString(t.shape()), " needs ", scale_bytes,
        format == QuantFormat::kInt8 ? " (one float32 per row)" : " (one E4M3 byte per 16 values)"));
  }
  if (format == QuantFormat::kNvfp4 &&
      (!std::isfinite(t.tensor_scale()) || !(t.tensor_scale() > 0.0f))) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".tensor_scale is ", t.tensor_scale(), "; NVFP4 needs a finite scale > 0"));
  }
  // Scales of a resident tensor were checked when it was uploaded (and may be in device
  // memory).
  if (!check_scales) return format;
  if (absl::Status s = CheckScaleBytes(format, scales.data(),
                                       static_cast<int64_t>(scales.size()), k, 0);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, format == QuantFormat::kInt8 ? "." : ": ", s.message()));
  }
  return format;
}

absl::Status Dequantize(const gemm::v1::QuantizedTensor& t, QuantFormat format,
                        absl::string_view data, absl::string_view scales, float* out) {
  return DequantizeOperand({format, data, scales, t.tensor_scale()}, t.shape(0), t.shape(1),
                           out);
}

}  // namespace

wire::QuantizedPayloads PayloadsOf(const gemm::v1::QuantizedMatmulRequest& request) {
  return {request.a().data(), request.a().scales(), request.a_dense().data(),
          request.b().data(), request.b().scales()};
}

absl::StatusOr<ValidatedQuantized> ValidateQuantizedMatmul(
    const gemm::v1::QuantizedMatmulRequest& request, const ValidationLimits& limits) {
  return ValidateQuantizedMatmul(request, PayloadsOf(request), limits);
}

absl::StatusOr<ValidatedQuantized> ValidateQuantizedMatmul(
    const gemm::v1::QuantizedMatmulRequest& request, const wire::QuantizedPayloads& p,
    const ValidationLimits& limits, ResidentOperands resident) {
  if (!request.has_b()) return absl::InvalidArgumentError("b is missing (set b or b_ref)");
  // A resident operand is bounded by the tensor store's cap instead of max_elements.
  ValidationLimits unbounded = limits;
  unbounded.max_elements = std::numeric_limits<int64_t>::max();
  ValidatedQuantized v;
  absl::StatusOr<QuantFormat> b =
      CheckQuantized(request.b(), p.b_data, p.b_scales, resident.b ? "b_ref" : "b",
                     resident.b ? unbounded : limits, !resident.b);
  if (!b.ok()) return b.status();
  v.b_format = *b;
  v.n = request.b().shape(0);
  v.k = request.b().shape(1);
  v.input_bytes = static_cast<int64_t>(p.b_data.size() + p.b_scales.size());

  int64_t a_k = 0;
  switch (request.a_operand_case()) {
    case gemm::v1::QuantizedMatmulRequest::kA: {
      absl::StatusOr<QuantFormat> a =
          CheckQuantized(request.a(), p.a_data, p.a_scales, resident.a ? "a_ref" : "a",
                         resident.a ? unbounded : limits, !resident.a);
      if (!a.ok()) return a.status();
      v.a_format = *a;
      v.m = request.a().shape(0);
      a_k = request.a().shape(1);
      v.input_bytes += static_cast<int64_t>(p.a_data.size() + p.a_scales.size());
      break;
    }
    case gemm::v1::QuantizedMatmulRequest::kADense: {
      const gemm::v1::Tensor& a = request.a_dense();
      if (absl::Status s = CheckShape(a.shape(), resident.a ? "a_ref" : "a_dense",
                                      resident.a ? unbounded : limits);
          !s.ok()) {
        return s;
      }
      const std::optional<DataType> type = DataTypeFromProto(a.dtype());
      if (!type || (*type != DataType::kFloat32 && *type != DataType::kFloat16 &&
                    *type != DataType::kBFloat16)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a_dense.dtype ", ProtoDataTypeName(a.dtype()),
            " is not accepted; expected FLOAT32, FLOAT16 or BFLOAT16"));
      }
      v.a_dense_type = *type;
      v.m = a.shape(0);
      a_k = a.shape(1);
      const int64_t bytes = v.m * a_k * static_cast<int64_t>(DataTypeSize(*type));
      if (static_cast<int64_t>(p.a_dense_data.size()) != bytes) {
        return absl::InvalidArgumentError(absl::StrCat("a_dense.data has ", p.a_dense_data.size(),
                                                       " bytes; shape ", ShapeString(a.shape()),
                                                       " ", DataTypeName(*type), " needs ",
                                                       bytes));
      }
      v.input_bytes += bytes;
      break;
    }
    default:
      return absl::InvalidArgumentError(
          "a is missing: set a (quantized), a_dense (FLOAT32/FLOAT16/BFLOAT16) or a_ref");
  }
  if (a_k != v.k) {
    return absl::InvalidArgumentError(absl::StrCat("K mismatch: A is [", v.m, ", ", a_k,
                                                   "] and B is [", v.n, ", ", v.k,
                                                   "]; both are K-major, so K must agree"));
  }
  int64_t c_elements = 0;
  if (__builtin_mul_overflow(v.m, v.n, &c_elements) || c_elements > limits.max_elements) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the result [", v.m, ", ", v.n, "] has more than ", limits.max_elements,
        " elements (--max_elements)"));
  }
  v.output_bytes = c_elements * 4;
  if (v.output_bytes + kResponseOverheadBytes > limits.max_message_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the result takes ", v.output_bytes, " bytes; responses are limited to ",
        limits.max_message_bytes, " (--max_message_bytes)"));
  }
  v.kernel = request.kernel();
  return v;
}

QuantizedOperands PackedOperands(const gemm::v1::QuantizedMatmulRequest& request,
                                 const ValidatedQuantized& v, const wire::QuantizedPayloads& p) {
  QuantizedOperands q;
  q.m = v.m;
  q.n = v.n;
  q.k = v.k;
  if (v.a_format) {
    q.a = QuantizedOperand{*v.a_format, p.a_data, p.a_scales, request.a().tensor_scale()};
  } else {
    q.a_dense_type = v.a_dense_type;
    q.a_dense = p.a_dense_data;
  }
  q.b = QuantizedOperand{v.b_format, p.b_data, p.b_scales, request.b().tensor_scale()};
  return q;
}

absl::Status DequantizeOperands(const gemm::v1::QuantizedMatmulRequest& request,
                                const ValidatedQuantized& v, const wire::QuantizedPayloads& p,
                                float* a_out, float* b_out) {
  if (v.a_format) {
    if (absl::Status s = Dequantize(request.a(), *v.a_format, p.a_data, p.a_scales, a_out);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("a: ", s.message()));
    }
  } else {
    const absl::string_view data = p.a_dense_data;
    for (int64_t i = 0; i < v.m * v.k; ++i) {
      a_out[i] = static_cast<float>(LoadAsDouble(data.data(), v.a_dense_type, i));
    }
  }
  if (absl::Status s = Dequantize(request.b(), v.b_format, p.b_data, p.b_scales, b_out);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("b: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace gemmd
