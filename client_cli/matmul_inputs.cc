#include "client_cli/matmul_inputs.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kernels/half.h"
#include "kernels/npy_io.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"

namespace gemmd {
namespace {

absl::StatusOr<DataType> ParseDataType(const std::string& name, const char* flag) {
  const std::string s = absl::AsciiStrToLower(name);
  if (s == "float32" || s == "fp32" || s == "f32") return DataType::kFloat32;
  if (s == "float16" || s == "fp16" || s == "f16") return DataType::kFloat16;
  if (s == "bfloat16" || s == "bf16") return DataType::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", name, " is not one of float32, float16, bfloat16"));
}

absl::StatusOr<gemm::v1::Precision> ParsePrecision(const std::string& name) {
  const std::string s = absl::AsciiStrToLower(name);
  if (s == "auto") return gemm::v1::PRECISION_AUTO;
  if (s == "fp32") return gemm::v1::PRECISION_FP32;
  if (s == "fp16_tensor" || s == "fp16") return gemm::v1::PRECISION_FP16_TENSOR;
  return absl::InvalidArgumentError(
      absl::StrCat("--precision=", name, " is not one of auto, fp32, fp16_tensor"));
}

// N(0,1) values stored as `type`: never zeros, so a kernel that skips work shows up.
std::string RandomData(DataType type, int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::string out(static_cast<size_t>(count) * DataTypeSize(type), '\0');
  if (type == DataType::kFloat32) {
    float* p = reinterpret_cast<float*>(out.data());
    for (int64_t i = 0; i < count; ++i) p[i] = dist(rng);
  } else {
    uint16_t* p = reinterpret_cast<uint16_t*>(out.data());
    const bool half = type == DataType::kFloat16;
    for (int64_t i = 0; i < count; ++i) {
      const float v = dist(rng);
      p[i] = half ? FloatToHalfBits(v) : FloatToBf16Bits(v);
    }
  }
  return out;
}

void SetTensor(gemm::v1::Tensor* t, const std::vector<int64_t>& shape, DataType type,
               std::string data) {
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(DataTypeToProto(type));
  t->set_data(std::move(data));
}

std::vector<int64_t> Shape(int64_t batch, int64_t rows, int64_t cols) {
  if (batch > 0) return {batch, rows, cols};
  return {rows, cols};
}

}  // namespace

double ToleranceFor(const GemmProblem& p) {
  double tol = p.precision == Precision::kFp16Tensor ? 1e-3 : 1e-5;
  if (p.c_type == DataType::kFloat16) tol = std::max(tol, 1e-3);
  if (p.c_type == DataType::kBFloat16) tol = std::max(tol, 8e-3);
  return tol;
}

absl::StatusOr<std::unique_ptr<MatmulInputs>> BuildMatmulInputs(const CliOptions& o) {
  auto inputs = std::make_unique<MatmulInputs>();
  gemm::v1::MatmulRequest& r = inputs->request;
  GemmProblem& p = inputs->problem;

  absl::StatusOr<gemm::v1::Precision> precision = ParsePrecision(o.precision);
  if (!precision.ok()) return precision.status();
  absl::StatusOr<DataType> out_type = ParseDataType(o.output_dtype, "output_dtype");
  if (!out_type.ok()) return out_type.status();
  p.transpose_a = o.transpose_a;
  p.transpose_b = o.transpose_b;
  p.alpha = static_cast<float>(o.alpha);
  p.beta = static_cast<float>(o.beta);
  p.c_type = *out_type;

  std::mt19937_64 rng(o.seed);
  int64_t batch_a = 0, batch_b = 0;
  if (!o.a_path.empty() || !o.b_path.empty()) {
    if (o.a_path.empty() || o.b_path.empty()) {
      return absl::InvalidArgumentError("--a and --b go together: give both .npy files or neither");
    }
    absl::StatusOr<NpyArray> a = ReadNpyFile(o.a_path);
    if (!a.ok()) return a.status();
    absl::StatusOr<NpyArray> b = ReadNpyFile(o.b_path);
    if (!b.ok()) return b.status();
    for (const NpyArray* x : {&*a, &*b}) {
      if (x->shape.size() != 2 && x->shape.size() != 3) {
        return absl::InvalidArgumentError(absl::StrCat(x == &*a ? o.a_path : o.b_path,
                                                       ": expected a 2-D or 3-D array, got ",
                                                       x->shape.size(), "-D"));
      }
    }
    const size_t ra = a->shape.size(), rb = b->shape.size();
    batch_a = ra == 3 ? a->shape[0] : 0;
    batch_b = rb == 3 ? b->shape[0] : 0;
    p.m = o.transpose_a ? a->shape[ra - 1] : a->shape[ra - 2];
    p.k = o.transpose_a ? a->shape[ra - 2] : a->shape[ra - 1];
    p.n = o.transpose_b ? b->shape[rb - 2] : b->shape[rb - 1];
    p.a_type = a->type;
    p.b_type = b->type;
    SetTensor(r.mutable_a(), a->shape, a->type, std::move(a->data));
    SetTensor(r.mutable_b(), b->shape, b->type, std::move(b->data));
  } else {
    if (o.m < 1 || o.n < 1 || o.k < 1 || o.batch < 0) {
      return absl::InvalidArgumentError("--m, --n, --k must be >= 1 and --batch >= 0");
    }
    absl::StatusOr<DataType> type = ParseDataType(o.dtype, "dtype");
    if (!type.ok()) return type.status();
    p.m = o.m;
    p.n = o.n;
    p.k = o.k;
    p.a_type = p.b_type = *type;
    batch_a = batch_b = o.batch;
    const int64_t items = std::max<int64_t>(o.batch, 1);
    SetTensor(r.mutable_a(), o.transpose_a ? Shape(o.batch, p.k, p.m) : Shape(o.batch, p.m, p.k),
              *type, RandomData(*type, items * p.m * p.k, rng));
    SetTensor(r.mutable_b(), o.transpose_b ? Shape(o.batch, p.n, p.k) : Shape(o.batch, p.k, p.n),
              *type, RandomData(*type, items * p.k * p.n, rng));
  }
  p.batch = std::max<int64_t>({batch_a, batch_b, 1});
  p.batch_stride_a = batch_a <= 1 && p.batch > 1 ? 0 : -1;
  p.batch_stride_b = batch_b <= 1 && p.batch > 1 ? 0 : -1;
  p.precision = *precision == gemm::v1::PRECISION_AUTO
                    ? (p.a_type == DataType::kFloat32 ? Precision::kFp32 : Precision::kFp16Tensor)
                    : *PrecisionFromProto(*precision);

  r.set_transpose_a(o.transpose_a);
  r.set_transpose_b(o.transpose_b);
  if (o.alpha != 1.0) r.set_alpha(p.alpha);
  r.set_beta(p.beta);
  r.set_precision(*precision);
  r.set_output_dtype(DataTypeToProto(p.c_type));
  r.set_kernel(o.kernel);
  if (o.beta != 0.0) {
    const int64_t batch_c = std::max(batch_a, batch_b);
    SetTensor(r.mutable_c(), Shape(batch_c, p.m, p.n), p.c_type,
              RandomData(p.c_type, std::max<int64_t>(batch_c, 1) * p.m * p.n, rng));
  }

  inputs->operands.a = r.a().data().data();
  inputs->operands.b = r.b().data().data();
  inputs->operands.c_in = r.has_c() ? r.c().data().data() : nullptr;
  inputs->payload_bytes =
      static_cast<int64_t>(r.a().data().size() + r.b().data().size() + r.c().data().size());
  return inputs;
}

absl::StatusOr<double> VerifyResult(const MatmulInputs& inputs,
                                    const gemm::v1::MatmulResponse& info, absl::string_view c) {
  const GemmProblem& p = inputs.problem;
  const int64_t count = p.batch * p.m * p.n;
  const std::optional<DataType> type = DataTypeFromProto(info.c().dtype());
  if (!type || *type != p.c_type ||
      static_cast<int64_t>(c.size()) != count * static_cast<int64_t>(DataTypeSize(p.c_type))) {
    return absl::InternalError(
        absl::StrCat("the response's C (", c.size(), " bytes, dtype ",
                     ProtoDataTypeName(info.c().dtype()), ") does not match the request's [",
                     p.batch, ",", p.m, ",", p.n, "] ", DataTypeName(p.c_type)));
  }
  const std::vector<double> ref = ReferenceGemm(p, inputs.operands);
  return RelativeError(ref.data(), c.data(), p.c_type, count);
}

}  // namespace gemmd
