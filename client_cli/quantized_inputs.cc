#include "client_cli/quantized_inputs.h"

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/half.h"
#include "kernels/npy_io.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "proto/quantized_tensor.h"
#include "client/tensor_chunks.h"

namespace gemmd {
namespace {

std::vector<float> Gaussian(int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(count));
  for (float& v : out) v = dist(rng);
  return out;
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

// A resident operand for --`flag` @handle (downloaded when `download`), [rows, K].
absl::StatusOr<ResidentOperand> FindResident(const std::string& handle, const char* flag,
                                             bool download, ResidentLookup* resident) {
  if (handle.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " @: the handle is missing"));
  }
  if (resident == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " @", handle, ": resident tensors need a server"));
  }
  absl::StatusOr<ResidentOperand> found = resident->Find(handle, download);
  if (!found.ok()) return found.status();
  if (found->header.shape_size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " @", handle,
                                                   ": expected a 2-D tensor [rows, K], got rank ",
                                                   found->header.shape_size()));
  }
  return found;
}

}  // namespace

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

absl::Status QuantizeMatrix(QuantFormat format, const std::vector<float>& x, int64_t rows,
                            int64_t k, gemm::v1::QuantizedTensor* proto,
                            std::vector<float>* dequantized) {
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

absl::StatusOr<std::unique_ptr<QuantizedInputs>> BuildQuantizedInputs(const CliOptions& o,
                                                                      ResidentLookup* resident) {
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
  const std::optional<std::string> a_handle = HandleOf(o.a_path);
  const std::optional<std::string> b_handle = HandleOf(o.b_path);
  if ((!o.a_path.empty() && o.b_path.empty() && !a_handle) ||
      (!o.b_path.empty() && o.a_path.empty() && !b_handle)) {
    return absl::InvalidArgumentError("--a and --b go together (A [M,K] and B [N,K])");
  }
  // Resident operands: their shapes (and format) first, which size the others.
  std::optional<ResidentOperand> ra, rb;
  if (b_handle) {
    absl::StatusOr<ResidentOperand> found = FindResident(*b_handle, "b", o.verify, resident);
    if (!found.ok()) return found.status();
    rb = *std::move(found);
    if (!rb->quantized()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--b @", *b_handle, " is a dense tensor; QuantizedMatmul's B is a quantized one "
          "(gemm-cli put --format int8|nvfp4)"));
    }
    const QuantFormat format = rb->header.format() == gemm::v1::QUANT_FORMAT_INT8
                                   ? QuantFormat::kInt8
                                   : QuantFormat::kNvfp4;
    if (o.format_set && format != in->format) {
      return absl::InvalidArgumentError(absl::StrCat("--b @", *b_handle, " is ",
                                                     QuantFormatName(format), ", not --format=",
                                                     o.quant_format));
    }
    in->format = format;
    in->n = rb->header.shape(0);
    in->k = rb->header.shape(1);
  }
  if (a_handle) {
    absl::StatusOr<ResidentOperand> found = FindResident(*a_handle, "a", o.verify, resident);
    if (!found.ok()) return found.status();
    ra = *std::move(found);
    in->weight_only = !ra->quantized();
    in->m = ra->header.shape(0);
    if (rb && ra->header.shape(1) != in->k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--a @", *a_handle, " has K=", ra->header.shape(1), " and --b @", *b_handle,
          " K=", in->k, ": both are K-major [rows, K], so K must agree"));
    }
    in->k = ra->header.shape(1);
  }

  std::mt19937_64 rng(o.seed);
  if (!o.a_path.empty() && !a_handle) {
    int64_t k = 0;
    absl::StatusOr<std::vector<float>> a = LoadMatrix(o.a_path, &in->m, &k);
    if (!a.ok()) return a.status();
    if (rb && k != in->k) {
      return absl::InvalidArgumentError(absl::StrCat("A is [", in->m, ", ", k, "] and B is [",
                                                     in->n, ", ", in->k,
                                                     "]: both are K-major, so K must agree"));
    }
    in->k = k;
    in->a = *std::move(a);
  }
  if (!o.b_path.empty() && !b_handle) {
    int64_t k = 0;
    absl::StatusOr<std::vector<float>> b = LoadMatrix(o.b_path, &in->n, &k);
    if (!b.ok()) return b.status();
    if ((ra || !in->a.empty()) && k != in->k) {
      return absl::InvalidArgumentError(absl::StrCat(
          "A is [", in->m, ", ", in->k, "] and B is [", in->n, ", ", k,
          "]: both are K-major (B is the weight [N, K]), so K must agree"));
    }
    in->k = k;
    in->b = *std::move(b);
  }
  if (o.a_path.empty() || o.b_path.empty()) {
    // Random operands, N(0, 1): K from a resident operand when there is one.
    if (o.a_path.empty()) in->m = o.m;
    if (o.b_path.empty()) in->n = o.n;
    if (!ra && !rb) in->k = o.k;
    if (in->m < 1 || in->n < 1 || in->k < 1) {
      return absl::InvalidArgumentError("--m, --n and --k must be >= 1");
    }
    if (o.a_path.empty()) in->a = Gaussian(in->m * in->k, rng);
    if (o.b_path.empty()) in->b = Gaussian(in->n * in->k, rng);
  }

  if (rb) {
    in->request.mutable_b_ref()->set_handle(rb->handle);
    absl::StatusOr<TensorRows> rows = RowsOf(rb->header);
    if (!rows.ok()) return rows.status();
    in->b_bytes = rows->data_bytes() + rows->scales_bytes();
    if (rb->downloaded) {
      absl::StatusOr<std::vector<float>> values = ValuesAsFloat(*rb);
      if (!values.ok()) return values.status();
      in->b_dequantized = *std::move(values);
    }
  } else {
    gemm::v1::QuantizedTensor* b = in->request.mutable_b();
    if (absl::Status s = QuantizeMatrix(in->format, in->b, in->n, in->k, b, &in->b_dequantized);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("B: ", s.message()));
    }
    in->b_bytes = static_cast<int64_t>(b->data().size() + b->scales().size());
    in->sent_bytes = in->b_bytes;
  }
  if (ra) {
    in->request.mutable_a_ref()->set_handle(ra->handle);
    if (ra->downloaded) {
      absl::StatusOr<std::vector<float>> values = ValuesAsFloat(*ra);
      if (!values.ok()) return values.status();
      in->a_dequantized = *std::move(values);
    }
  } else if (in->weight_only) {
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
    if (absl::Status s = QuantizeMatrix(in->format, in->a, in->m, in->k, a, &in->a_dequantized);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("A: ", s.message()));
    }
    in->sent_bytes += static_cast<int64_t>(a->data().size() + a->scales().size());
  }
  // A resident operand's FP32 original is not here: no format error to measure.
  if (ra || rb) {
    in->a.clear();
    in->b.clear();
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
  if (static_cast<int64_t>(in.a_dequantized.size()) != in.m * in.k ||
      static_cast<int64_t>(in.b_dequantized.size()) != in.n * in.k) {
    return absl::FailedPreconditionError("the operands sent by handle were not downloaded");
  }
  QuantizedErrors e;
  e.kernel = ErrorOf(in.a_dequantized, in.b_dequantized, in, c);
  e.has_format = !in.a.empty() && !in.b.empty();
  if (e.has_format) e.format = ErrorOf(in.a, in.b, in, c);
  return e;
}

}  // namespace gemmd
