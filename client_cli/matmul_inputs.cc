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
  if (s == "float64" || s == "fp64" || s == "f64") return DataType::kFloat64;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", name, " is not one of float32, float16, bfloat16, float64"));
}

absl::StatusOr<gemm::v1::Precision> ParsePrecision(const std::string& name) {
  const std::string s = absl::AsciiStrToLower(name);
  if (s == "auto") return gemm::v1::PRECISION_AUTO;
  if (s == "fp32") return gemm::v1::PRECISION_FP32;
  if (s == "fp16_tensor" || s == "fp16") return gemm::v1::PRECISION_FP16_TENSOR;
  if (s == "fp64") return gemm::v1::PRECISION_FP64;
  return absl::InvalidArgumentError(
      absl::StrCat("--precision=", name, " is not one of auto, fp32, fp16_tensor, fp64"));
}

// N(0,1) values stored as `type`: never zeros, so a kernel that skips work shows up.
std::string RandomData(DataType type, int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::string out(static_cast<size_t>(count) * DataTypeSize(type), '\0');
  if (type == DataType::kFloat32) {
    float* p = reinterpret_cast<float*>(out.data());
    for (int64_t i = 0; i < count; ++i) p[i] = dist(rng);
  } else if (type == DataType::kFloat64) {
    std::normal_distribution<double> dist64(0.0, 1.0);  // every bit of the significand
    double* p = reinterpret_cast<double*>(out.data());
    for (int64_t i = 0; i < count; ++i) p[i] = dist64(rng);
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

// An operand as the command line gives it: random, a .npy file, or a resident tensor.
struct Operand {
  std::vector<int64_t> shape;
  DataType type = DataType::kFloat32;
  std::string data;    // its values: inline, or a resident tensor downloaded
  std::string handle;  // set: it goes by reference
};

// --flag `spec`: a .npy file, or @HANDLE looked up in `resident` (downloaded when
// `download`).
absl::StatusOr<Operand> ReadOperand(const std::string& spec, const char* flag, bool download,
                                    ResidentLookup* resident) {
  Operand op;
  if (std::optional<std::string> handle = HandleOf(spec)) {
    if (handle->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " @: the handle is missing"));
    }
    if (resident == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " ", spec, ": resident tensors need a server"));
    }
    absl::StatusOr<ResidentOperand> found = resident->Find(*handle, download);
    if (!found.ok()) return found.status();
    absl::StatusOr<DataType> type = DenseTypeOf(*found, flag);
    if (!type.ok()) return type.status();
    op.shape = found->shape();
    op.type = *type;
    op.data = std::move(found->data);
    op.handle = *handle;
  } else {
    absl::StatusOr<NpyArray> array = ReadNpyFile(spec);
    if (!array.ok()) return array.status();
    op.shape = std::move(array->shape);
    op.type = array->type;
    op.data = std::move(array->data);
  }
  if (op.shape.size() != 2 && op.shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec, ": expected a 2-D or 3-D array, got ", op.shape.size(), "-D"));
  }
  return op;
}

enum class Slot { kA, kB, kC };

// Into the request as operand `slot`: inline, or by handle (its bytes, when downloaded,
// to `resident`). Only the field used is touched: a set message field is sent.
void Place(Operand op, Slot slot, gemm::v1::MatmulRequest* r, std::string* resident) {
  if (!op.handle.empty()) {
    gemm::v1::TensorHandle* ref = slot == Slot::kA   ? r->mutable_a_ref()
                                  : slot == Slot::kB ? r->mutable_b_ref()
                                                     : r->mutable_c_ref();
    ref->set_handle(op.handle);
    *resident = std::move(op.data);
    return;
  }
  gemm::v1::Tensor* t = slot == Slot::kA   ? r->mutable_a()
                        : slot == Slot::kB ? r->mutable_b()
                                           : r->mutable_c();
  SetTensor(t, op.shape, op.type, std::move(op.data));
}

}  // namespace

double ToleranceFor(const GemmProblem& p) {
  // FP64 against the long-double reference: about sqrt(K) roundings of 2^-53 each.
  if (p.precision == Precision::kFp64) {
    return 1e-13 * std::max(1.0, std::sqrt(static_cast<double>(p.k) / 16384.0));
  }
  double tol = p.precision == Precision::kFp16Tensor ? 1e-3 : 1e-5;
  if (p.c_type == DataType::kFloat16) tol = std::max(tol, 1e-3);
  if (p.c_type == DataType::kBFloat16) tol = std::max(tol, 8e-3);
  return tol;
}

absl::StatusOr<std::unique_ptr<MatmulInputs>> BuildMatmulInputs(const CliOptions& o,
                                                                ResidentLookup* resident) {
  auto inputs = std::make_unique<MatmulInputs>();
  gemm::v1::MatmulRequest& r = inputs->request;
  GemmProblem& p = inputs->problem;

  absl::StatusOr<gemm::v1::Precision> precision = ParsePrecision(o.precision);
  if (!precision.ok()) return precision.status();
  std::optional<DataType> out_type;  // unset: FLOAT32, FLOAT64 for FP64 (the server's rule)
  if (!o.output_dtype.empty()) {
    absl::StatusOr<DataType> parsed = ParseDataType(o.output_dtype, "output_dtype");
    if (!parsed.ok()) return parsed.status();
    out_type = *parsed;
  }
  p.transpose_a = o.transpose_a;
  p.transpose_b = o.transpose_b;
  if (!o.c_path.empty() && o.beta == 0.0) {
    return absl::InvalidArgumentError("--c is the C of beta * C: it needs --beta != 0");
  }

  std::mt19937_64 rng(o.seed);
  int64_t batch_a = 0, batch_b = 0;
  Operand a, b;
  if (!o.a_path.empty() || !o.b_path.empty()) {
    // A file goes with a file or a handle; a handle may go alone (the other operand is
    // then random, shaped by the handle's and --m / --n).
    const bool a_given = !o.a_path.empty(), b_given = !o.b_path.empty();
    if ((a_given && !b_given && !HandleOf(o.a_path)) ||
        (b_given && !a_given && !HandleOf(o.b_path))) {
      return absl::InvalidArgumentError("--a and --b go together: give both .npy files or neither");
    }
    if (a_given) {
      absl::StatusOr<Operand> read = ReadOperand(o.a_path, "a", o.verify, resident);
      if (!read.ok()) return read.status();
      a = *std::move(read);
      const size_t ra = a.shape.size();
      batch_a = ra == 3 ? a.shape[0] : 0;
      p.m = o.transpose_a ? a.shape[ra - 1] : a.shape[ra - 2];
      p.k = o.transpose_a ? a.shape[ra - 2] : a.shape[ra - 1];
    }
    if (b_given) {
      absl::StatusOr<Operand> read = ReadOperand(o.b_path, "b", o.verify, resident);
      if (!read.ok()) return read.status();
      b = *std::move(read);
      const size_t rb = b.shape.size();
      batch_b = rb == 3 ? b.shape[0] : 0;
      p.n = o.transpose_b ? b.shape[rb - 2] : b.shape[rb - 1];
      if (!a_given) p.k = o.transpose_b ? b.shape[rb - 1] : b.shape[rb - 2];
    }
    if (o.batch < 0 || (!a_given && o.m < 1) || (!b_given && o.n < 1)) {
      return absl::InvalidArgumentError("--m, --n, --k must be >= 1 and --batch >= 0");
    }
    if (!a_given) {
      p.m = o.m;
      a.type = b.type;
      a.shape = o.transpose_a ? Shape(o.batch, p.k, p.m) : Shape(o.batch, p.m, p.k);
      a.data = RandomData(a.type, std::max<int64_t>(o.batch, 1) * p.m * p.k, rng);
      batch_a = o.batch;
    }
    if (!b_given) {
      p.n = o.n;
      b.type = a.type;
      b.shape = o.transpose_b ? Shape(o.batch, p.n, p.k) : Shape(o.batch, p.k, p.n);
      b.data = RandomData(b.type, std::max<int64_t>(o.batch, 1) * p.k * p.n, rng);
      batch_b = o.batch;
    }
  } else {
    if (o.m < 1 || o.n < 1 || o.k < 1 || o.batch < 0) {
      return absl::InvalidArgumentError("--m, --n, --k must be >= 1 and --batch >= 0");
    }
    absl::StatusOr<DataType> type = ParseDataType(o.dtype, "dtype");
    if (!type.ok()) return type.status();
    p.m = o.m;
    p.n = o.n;
    p.k = o.k;
    a.type = b.type = *type;
    batch_a = batch_b = o.batch;
    const int64_t items = std::max<int64_t>(o.batch, 1);
    a.shape = o.transpose_a ? Shape(o.batch, p.k, p.m) : Shape(o.batch, p.m, p.k);
    a.data = RandomData(*type, items * p.m * p.k, rng);
    b.shape = o.transpose_b ? Shape(o.batch, p.n, p.k) : Shape(o.batch, p.k, p.n);
    b.data = RandomData(*type, items * p.k * p.n, rng);
  }
  p.a_type = a.type;
  p.b_type = b.type;
  p.batch = std::max<int64_t>({batch_a, batch_b, 1});
  p.batch_stride_a = batch_a <= 1 && p.batch > 1 ? 0 : -1;
  p.batch_stride_b = batch_b <= 1 && p.batch > 1 ? 0 : -1;
  p.precision = *precision != gemm::v1::PRECISION_AUTO ? *PrecisionFromProto(*precision)
                : p.a_type == DataType::kFloat32       ? Precision::kFp32
                : p.a_type == DataType::kFloat64       ? Precision::kFp64
                                                       : Precision::kFp16Tensor;
  const bool fp64 = p.precision == Precision::kFp64;
  p.c_type = out_type ? *out_type : fp64 ? DataType::kFloat64 : DataType::kFloat32;
  // The server computes the other precisions with alpha and beta rounded to FP32.
  p.alpha = fp64 ? o.alpha : RoundedToFp32(o.alpha);
  p.beta = fp64 ? o.beta : RoundedToFp32(o.beta);

  r.set_transpose_a(o.transpose_a);
  r.set_transpose_b(o.transpose_b);
  if (o.alpha != 1.0) r.set_alpha_f64(o.alpha);
  if (o.beta != 0.0) r.set_beta_f64(o.beta);
  r.set_precision(*precision);
  r.set_output_dtype(DataTypeToProto(p.c_type));
  r.set_kernel(o.kernel);
  if (o.keep_c) {
    absl::StatusOr<uint32_t> ttl = TtlOf(o);
    if (!ttl.ok()) return ttl.status();
    r.mutable_keep_c()->set_ttl_s(*ttl);
    r.mutable_keep_c()->set_label(o.label);
  }
  Place(std::move(a), Slot::kA, &r, &inputs->resident_data[0]);
  Place(std::move(b), Slot::kB, &r, &inputs->resident_data[1]);
  if (o.beta != 0.0) {
    const int64_t batch_c = std::max(batch_a, batch_b);
    Operand c;
    if (!o.c_path.empty()) {
      absl::StatusOr<Operand> read = ReadOperand(o.c_path, "c", o.verify, resident);
      if (!read.ok()) return read.status();
      c = *std::move(read);
      if (c.type != p.c_type) {
        return absl::InvalidArgumentError(
            absl::StrCat("--c is ", DataTypeName(c.type), "; the C input has C's dtype, ",
                         DataTypeName(p.c_type), " (--output_dtype)"));
      }
    } else {
      c.type = p.c_type;
      c.shape = Shape(batch_c, p.m, p.n);
      c.data = RandomData(p.c_type, std::max<int64_t>(batch_c, 1) * p.m * p.n, rng);
    }
    Place(std::move(c), Slot::kC, &r, &inputs->resident_data[2]);
  }

  auto values = [&](const gemm::v1::Tensor& t, bool by_ref, const std::string& resident_data)
      -> const void* {
    if (!by_ref) return t.data().data();
    return resident_data.empty() ? nullptr : resident_data.data();
  };
  inputs->operands.a = values(r.a(), r.has_a_ref(), inputs->resident_data[0]);
  inputs->operands.b = values(r.b(), r.has_b_ref(), inputs->resident_data[1]);
  inputs->operands.c_in = r.has_c() || r.has_c_ref()
                              ? values(r.c(), r.has_c_ref(), inputs->resident_data[2])
                              : nullptr;
  inputs->payload_bytes =
      static_cast<int64_t>(r.a().data().size() + r.b().data().size() + r.c().data().size());
  return inputs;
}

absl::StatusOr<double> VerifyResult(const MatmulInputs& inputs,
                                    const gemm::v1::MatmulResponse& info, absl::string_view c) {
  const GemmProblem& p = inputs.problem;
  if (!inputs.has_reference()) {
    return absl::FailedPreconditionError("the operands sent by handle were not downloaded");
  }
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
