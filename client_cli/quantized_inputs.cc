#include "client_cli/quantized_inputs.h"

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/half.h"
#include "kernels/npy_io.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "proto/quantized_tensor.h"

namespace gemmd {
namespace {

std::vector<float> Gaussian(int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(count));
  for (float& v : out) v = dist(rng);
  return out;
}

// A [rows, K] matrix from a .npy file (FLOAT32, FLOAT16 or BFLOAT16), widened to FP32.
absl::StatusOr<std::vector<float>> LoadMatrix(const std::string& path, int64_t* rows,
                                              int64_t* cols) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  if (!array.ok()) return array.status();
  if (array->shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a 2-D array [rows, K], got rank ", array->shape.size()));
  }
  *rows = array->shape[0];
  *cols = array->shape[1];
  std::vector<float> out(static_cast<size_t>(*rows * *cols));
  for (int64_t i = 0; i < *rows * *cols; ++i) {
    out[i] = static_cast<float>(LoadAsDouble(array->data.data(), array->type, i));
  }
  return out;
}

// Quantizes x [rows, k]; fills the proto and the dequantized values.
absl::Status Quantize(QuantFormat format, const std::vector<float>& x, int64_t rows, int64_t k,
                      gemm::v1::QuantizedTensor* proto, std::vector<float>* dequantized) {
  dequantized->resize(x.size());
  if (format == QuantFormat::kInt8) {
    absl::StatusOr<Int8Matrix> q = QuantizeInt8(x.data(), rows, k);
    if (!q.ok()) return q.status();
    DequantizeInt8(*q, dequantized->data());
    *proto = ToProto(*q);
    return absl::OkStatus();
  }
  absl::StatusOr<Nvfp4Matrix> q = QuantizeNvfp4(x.data(), rows, k);
  if (!q.ok()) return q.status();
  *proto = ToProto(*q);
  return DequantizeNvfp4(*q, dequantized->data());
}

double ErrorOf(const std::vector<float>& a, const std::vector<float>& b, const QuantizedInputs& in,
               absl::string_view c) {
  GemmProblem p;
  p.m = in.m;
  p.n = in.n;
  p.k = in.k;
  p.transpose_b = true;  // B is [N, K]
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  return RelativeError(ref.data(), c.data(), DataType::kFloat32, in.m * in.n);
}

}  // namespace

absl::StatusOr<std::unique_ptr<QuantizedInputs>> BuildQuantizedInputs(const CliOptions& o) {
  auto in = std::make_unique<QuantizedInputs>();
  if (o.quant_format == "int8") {
    in->format = QuantFormat::kInt8;
  } else if (o.quant_format == "nvfp4") {
    in->format = QuantFormat::kNvfp4;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--format=", o.quant_format, " is not one of int8, nvfp4"));
  }
  in->weight_only = o.weight_only;
  if (o.a_path.empty() != o.b_path.empty()) {
    return absl::InvalidArgumentError("--a and --b go together (A [M,K] and B [N,K])");
  }
  if (!o.a_path.empty()) {
    int64_t a_k = 0, b_k = 0;
    absl::StatusOr<std::vector<float>> a = LoadMatrix(o.a_path, &in->m, &a_k);
    if (!a.ok()) return a.status();
    absl::StatusOr<std::vector<float>> b = LoadMatrix(o.b_path, &in->n, &b_k);
    if (!b.ok()) return b.status();
    if (a_k != b_k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "A is [", in->m, ", ", a_k, "] and B is [", in->n, ", ", b_k,
          "]: both are K-major (B is the weight [N, K]), so K must agree"));
    }
    in->k = a_k;
    in->a = *std::move(a);
    in->b = *std::move(b);
  } else {
    if (o.m < 1 || o.n < 1 || o.k < 1) {
      return absl::InvalidArgumentError("--m, --n and --k must be >= 1");
    }
    in->m = o.m;
    in->n = o.n;
    in->k = o.k;
    std::mt19937_64 rng(o.seed);
    in->a = Gaussian(in->m * in->k, rng);
    in->b = Gaussian(in->n * in->k, rng);
  }

  gemm::v1::QuantizedTensor* b = in->request.mutable_b();
  if (absl::Status s = Quantize(in->format, in->b, in->n, in->k, b, &in->b_dequantized);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("B: ", s.message()));
  }
  in->sent_bytes = static_cast<int64_t>(b->data().size() + b->scales().size());
  if (in->weight_only) {
    DataType type = DataType::kFloat32;
    if (o.dtype == "float16") {
      type = DataType::kFloat16;
    } else if (o.dtype == "bfloat16") {
      type = DataType::kBFloat16;
    } else if (o.dtype != "float32") {
      return absl::InvalidArgumentError(
          absl::StrCat("--dtype=", o.dtype, " is not one of float32, float16, bfloat16"));
    }
    gemm::v1::Tensor* a = in->request.mutable_a_dense();
    a->add_shape(in->m);
    a->add_shape(in->k);
    a->set_dtype(DataTypeToProto(type));
    std::string* data = a->mutable_data();
    data->resize(static_cast<size_t>(in->m * in->k) * DataTypeSize(type));
    in->a_dequantized.resize(in->a.size());
    for (size_t i = 0; i < in->a.size(); ++i) {
      char* at = data->data() + i * DataTypeSize(type);
      if (type == DataType::kFloat32) {
        std::memcpy(at, &in->a[i], 4);
      } else {
        const uint16_t bits = type == DataType::kFloat16 ? FloatToHalfBits(in->a[i])
                                                         : FloatToBf16Bits(in->a[i]);
        std::memcpy(at, &bits, 2);
      }
      in->a_dequantized[i] = static_cast<float>(LoadAsDouble(data->data(), type, i));
    }
    in->sent_bytes += static_cast<int64_t>(data->size());
  } else {
    gemm::v1::QuantizedTensor* a = in->request.mutable_a();
    if (absl::Status s = Quantize(in->format, in->a, in->m, in->k, a, &in->a_dequantized);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("A: ", s.message()));
    }
    in->sent_bytes += static_cast<int64_t>(a->data().size() + a->scales().size());
  }
  in->request.set_kernel(o.kernel);
  return in;
}

absl::StatusOr<QuantizedErrors> QuantizedResultErrors(const QuantizedInputs& in,
                                                      absl::string_view c) {
  if (static_cast<int64_t>(c.size()) != in.m * in.n * 4) {
    return absl::InvalidArgumentError(absl::StrCat("the result has ", c.size(), " bytes; [",
                                                   in.m, ", ", in.n, "] FLOAT32 needs ",
                                                   in.m * in.n * 4));
  }
  QuantizedErrors e;
  e.kernel = ErrorOf(in.a_dequantized, in.b_dequantized, in, c);
  e.format = ErrorOf(in.a, in.b, in, c);
  return e;
}

}  // namespace gemmd
