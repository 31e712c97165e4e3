#include "server/rpc/matmul_validation.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/proto_types.h"
#include "server/observability/client_text.h"

namespace gemmd {
namespace {

struct MatrixView {
  int64_t batch = 0;  // 0 = rank 2
  int64_t rows = 0;
  int64_t cols = 0;
  DataType type = DataType::kFloat32;
  const void* data = nullptr;
  int64_t bytes = 0;
};

// a*b into *out; false on overflow.
bool MulOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

absl::StatusOr<MatrixView> ParseMatrix(const gemm::v1::Tensor& t, absl::string_view data,
                                       absl::string_view name, const ValidationLimits& limits,
                                       bool resident) {
  constexpr char kExpected[] = "expected FLOAT32, FLOAT16, BFLOAT16 or FLOAT64";
  const std::optional<DataType> type = DataTypeFromProto(t.dtype());
  if (t.dtype() == gemm::v1::DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".dtype is unset; ", kExpected));
  }
  if (!type) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".dtype ", t.dtype(), " is not a DataType; ", kExpected));
  }
  if (*type == DataType::kInt8 || *type == DataType::kInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".dtype ", DataTypeName(*type), " is not accepted by Matmul; ",
                     kExpected, " (integer and quantized operands belong to QuantizedMatmul)"));
  }
  const int rank = t.shape_size();
  if (rank != 2 && rank != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".shape ", ShapeString(t.shape()), " has rank ", rank,
                     "; expected [rows, cols] or [batch, rows, cols]"));
  }
  int64_t elements = 1;
  bool overflow = false;
  for (int64_t dim : t.shape()) {
    if (dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".shape ", ShapeString(t.shape()),
                                                     " has a dimension <= 0; all must be >= 1"));
    }
    overflow = overflow || !MulOk(elements, dim, &elements);
  }
  // A resident operand is bounded by the tensor store's cap instead.
  if (overflow || (!resident && elements > limits.max_elements)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ".shape ", ShapeString(t.shape()), " has ",
                     overflow ? std::string("more than 2^63") : absl::StrCat(elements),
                     " elements; this server accepts at most ", limits.max_elements,
                     " per operand (--max_elements)"));
  }
  const int64_t bytes = elements * static_cast<int64_t>(DataTypeSize(*type));
  if (static_cast<int64_t>(data.size()) != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, ".data has ", data.size(),
                                                   " bytes; shape ", ShapeString(t.shape()), " ",
                                                   DataTypeName(*type), " needs ", bytes));
  }
  MatrixView view;
  view.batch = rank == 3 ? t.shape(0) : 0;
  view.rows = t.shape(rank - 2);
  view.cols = t.shape(rank - 1);
  view.type = *type;
  view.data = data.data();
  view.bytes = bytes;
  return view;
}

// Batch stride for an operand: 0 broadcasts a rank-2 (or batch-1) operand.
int64_t BatchStride(const MatrixView& v, int64_t batch) {
  return (v.batch == 0 || (v.batch == 1 && batch > 1)) ? 0 : v.rows * v.cols;
}

// A row block of a larger product (MatmulRequest.row_plan), for the cases where the
// server can promise the whole product's bits: see kRowPlanAlign.
absl::Status ApplyRowPlan(const gemm::v1::RowPlan& plan, GemmProblem* p) {
  const int64_t rows = plan.rows();
  const int64_t offset = plan.offset();
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("row_plan {rows=", rows, " offset=", offset,
                                                   "} for op(a) of ", p->m, " rows: ", why));
  };
  if (p->batch != 1) return refuse("a planned block must have batch 1");
  if (p->transpose_a) return refuse("a planned block's A must not be transposed");
  if (p->beta != 0.0) return refuse("a planned block must have beta 0");
  if (offset < 0 || rows < 1 || offset > rows || p->m > rows - offset) {
    return refuse("the block must lie inside the planned rows");
  }
  if (offset % kRowPlanAlign != 0) {
    return refuse(absl::StrCat("offset must be a multiple of ", kRowPlanAlign));
  }
  if (offset + p->m != rows && p->m % kRowPlanAlign != 0) {
    return refuse(absl::StrCat("a block that does not end the product must have a multiple of ",
                               kRowPlanAlign, " rows"));
  }
  int64_t planned_elements = 0;
  if (!MulOk(rows, p->n, &planned_elements) || !MulOk(planned_elements, p->k, &planned_elements) ||
      rows > std::numeric_limits<int32_t>::max()) {
    return refuse("the planned product is too large");
  }
  p->plan_m = rows;
  p->plan_row0 = offset;
  return absl::OkStatus();
}

}  // namespace

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return ShapeText(absl::MakeConstSpan(shape.data(), static_cast<size_t>(shape.size())));
}

absl::StatusOr<ValidatedMatmul> ValidateMatmul(const gemm::v1::MatmulRequest& request,
                                               const ValidationLimits& limits) {
  return ValidateMatmul(request, {request.a().data(), request.b().data(), request.c().data()},
                        limits, {});
}

absl::StatusOr<ValidatedMatmul> ValidateMatmul(const gemm::v1::MatmulRequest& request,
                                               const MatmulPayloads& payloads,
                                               const ValidationLimits& limits,
                                               MatmulResidency residency) {
  if (!request.has_a()) return absl::InvalidArgumentError("a is missing (set a or a_ref)");
  if (!request.has_b()) return absl::InvalidArgumentError("b is missing (set b or b_ref)");
  absl::StatusOr<MatrixView> a = ParseMatrix(request.a(), payloads.a,
                                             residency.a ? "a_ref" : "a", limits, residency.a);
  if (!a.ok()) return a.status();
  absl::StatusOr<MatrixView> b = ParseMatrix(request.b(), payloads.b,
                                             residency.b ? "b_ref" : "b", limits, residency.b);
  if (!b.ok()) return b.status();
  if (a->type != b->type) {
    return absl::InvalidArgumentError(absl::StrCat("a.dtype ", DataTypeName(a->type),
                                                   " and b.dtype ", DataTypeName(b->type),
                                                   " differ; both operands must have one dtype"));
  }

  ValidatedMatmul v;
  GemmProblem& p = v.problem;
  p.transpose_a = request.transpose_a();
  p.transpose_b = request.transpose_b();
  p.m = p.transpose_a ? a->cols : a->rows;
  p.k = p.transpose_a ? a->rows : a->cols;
  const int64_t k_b = p.transpose_b ? b->cols : b->rows;
  p.n = p.transpose_b ? b->rows : b->cols;
  if (p.k != k_b) {
    return absl::InvalidArgumentError(
        absl::StrCat("inner dimensions differ: op(a) is [M=", p.m, ", K=", p.k,
                     "] (transpose_a=", p.transpose_a ? "true" : "false", ") but op(b) is [K=", k_b,
                     ", N=", p.n, "] (transpose_b=", p.transpose_b ? "true" : "false", ")"));
  }
  if (a->batch > 1 && b->batch > 1 && a->batch != b->batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sizes differ: a has ", a->batch, ", b has ", b->batch,
                     "; they must match, or one operand must be rank 2 (shared)"));
  }
  p.batch = std::max<int64_t>({a->batch, b->batch, 1});
  p.a_type = a->type;
  p.b_type = b->type;
  p.batch_stride_a = BatchStride(*a, p.batch);
  p.batch_stride_b = BatchStride(*b, p.batch);

  const int precision = request.precision();
  if (precision == gemm::v1::PRECISION_AUTO) {
    p.precision = p.a_type == DataType::kFloat32   ? Precision::kFp32
                  : p.a_type == DataType::kFloat64 ? Precision::kFp64
                                                   : Precision::kFp16Tensor;
  } else {
    const std::optional<Precision> resolved = PrecisionFromProto(precision);
    if (!resolved) {
      return absl::InvalidArgumentError(
          absl::StrCat("precision ", precision,
                       " is not a Precision; expected AUTO, FP32, FP16_TENSOR or FP64"));
    }
    p.precision = *resolved;
  }
  // FP64 is its own path end to end: FLOAT64 in, FP64 arithmetic, FLOAT64 out. Rounding
  // FLOAT64 operands to another precision's type would lose what the caller sent them for.
  const bool fp64 = p.precision == Precision::kFp64;
  if (fp64 != (p.a_type == DataType::kFloat64)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "precision ", PrecisionName(p.precision), " with ", DataTypeName(p.a_type),
        " operands: FLOAT64 operands take precision FP64 (or AUTO), and FP64 takes FLOAT64 "
        "operands only"));
  }

  const int out_dtype = request.output_dtype();
  if (out_dtype == gemm::v1::DATA_TYPE_UNSPECIFIED) {
    p.c_type = fp64 ? DataType::kFloat64 : DataType::kFloat32;
  } else {
    const std::optional<DataType> t = DataTypeFromProto(out_dtype);
    const bool allowed = t && (fp64 ? *t == DataType::kFloat64
                                    : (*t == DataType::kFloat32 || *t == DataType::kFloat16 ||
                                       *t == DataType::kBFloat16));
    if (!allowed) {
      return absl::InvalidArgumentError(
          absl::StrCat("output_dtype ", ProtoDataTypeName(out_dtype),
                       " is not supported with precision ", PrecisionName(p.precision),
                       "; expected ", fp64 ? "FLOAT64" : "FLOAT32, FLOAT16 or BFLOAT16"));
    }
    p.c_type = *t;
  }

  p.alpha = request.has_alpha_f64() ? request.alpha_f64()
            : request.has_alpha()   ? static_cast<double>(request.alpha())
                                    : 1.0;
  p.beta = request.has_beta_f64() ? request.beta_f64() : static_cast<double>(request.beta());
  if (!std::isfinite(p.alpha) || !std::isfinite(p.beta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alpha and beta must be finite; got alpha=", p.alpha, " beta=", p.beta));
  }
  if (!fp64 && (std::fabs(p.alpha) > std::numeric_limits<float>::max() ||
                std::fabs(p.beta) > std::numeric_limits<float>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("alpha=", p.alpha, " and beta=", p.beta,
                                                   " must be finite in FP32 for precision ",
                                                   PrecisionName(p.precision)));
  }
  if (!fp64) {  // what those kernels compute with, beta == 0 included
    p.alpha = RoundedToFp32(p.alpha);
    p.beta = RoundedToFp32(p.beta);
  }

  int64_t out_elements = 0;
  if (!MulOk(p.m, p.n, &out_elements) || !MulOk(out_elements, p.batch, &out_elements) ||
      out_elements > limits.max_elements) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the result C [", p.batch, ",", p.m, ",", p.n, "] would exceed the ", limits.max_elements,
        " elements this server accepts per operand (--max_elements)"));
  }
  v.output_bytes = out_elements * static_cast<int64_t>(DataTypeSize(p.c_type));
  if (!residency.keep_c && v.output_bytes > limits.max_message_bytes - kResponseOverheadBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the result C would be ", v.output_bytes, " bytes; a response may carry at most ",
        limits.max_message_bytes - kResponseOverheadBytes,
        " (--max_message_bytes=", limits.max_message_bytes, ")"));
  }
  if (a->batch == 0 && b->batch == 0) {
    v.output_shape = {p.m, p.n};
  } else {
    v.output_shape = {p.batch, p.m, p.n};
  }

  v.operands.a = a->data;
  v.operands.b = b->data;
  v.input_bytes = a->bytes + b->bytes;
  if (p.beta != 0.0 && !request.has_c()) {
    return absl::InvalidArgumentError(
        absl::StrCat("beta is ", p.beta, " but c is missing; send c [M,N] or set beta to 0"));
  }
  if (request.has_c()) {
    absl::StatusOr<MatrixView> c =
        ParseMatrix(request.c(), payloads.c, residency.c ? "c_ref" : "c", limits, residency.c);
    if (!c.ok()) return c.status();
    if (c->type != p.c_type) {
      return absl::InvalidArgumentError(absl::StrCat("c.dtype ", DataTypeName(c->type),
                                                     " must equal the output dtype ",
                                                     DataTypeName(p.c_type)));
    }
    const bool batch_ok = c->batch == 0 || c->batch == 1 || c->batch == p.batch;
    if (c->rows != p.m || c->cols != p.n || !batch_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "c.shape ", ShapeString(request.c().shape()), " does not fit the result: expected [", p.m,
          ",", p.n, "] or [", p.batch, ",", p.m, ",", p.n, "]"));
    }
    if (p.beta != 0.0) {  // beta == 0: C is not an input (BLAS semantics)
      v.operands.c_in = c->data;
      p.batch_stride_c_in = BatchStride(*c, p.batch);
      v.input_bytes += c->bytes;
    }
  }
  v.kernel = request.kernel();
  if (request.has_row_plan()) {
    if (absl::Status s = ApplyRowPlan(request.row_plan(), &p); !s.ok()) return s;
  }
  return v;
}

}  // namespace gemmd
