// Every row of the error table that validation owns, with the exact messages clients see,
// plus the problems valid requests decode to.
#include "server/rpc/matmul_validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace gemmd {
namespace {

using gemm::v1::MatmulRequest;
using gemm::v1::Tensor;

constexpr ValidationLimits kLimits{/*max_message_bytes=*/int64_t{64} << 20,
                                   /*max_elements=*/int64_t{1} << 20};

void Fill(Tensor* t, std::vector<int64_t> shape, gemm::v1::DataType dtype, int elem_bytes) {
  int64_t n = 1;
  for (int64_t d : shape) {
    t->add_shape(d);
    n *= d;
  }
  t->set_dtype(dtype);
  t->set_data(std::string(static_cast<size_t>(n * elem_bytes), '\x01'));
}

MatmulRequest Valid(int64_t m = 4, int64_t n = 3, int64_t k = 5) {
  MatmulRequest r;
  Fill(r.mutable_a(), {m, k}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  Fill(r.mutable_b(), {k, n}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  return r;
}

void ExpectError(const MatmulRequest& r, absl::StatusCode code, const std::string& message) {
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, kLimits);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), code);
  EXPECT_EQ(v.status().message(), message);
}

TEST(MatmulValidationTest, ValidRequestDecodes) {
  MatmulRequest r = Valid();
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.m, 4);
  EXPECT_EQ(v->problem.n, 3);
  EXPECT_EQ(v->problem.k, 5);
  EXPECT_EQ(v->problem.batch, 1);
  EXPECT_EQ(v->problem.alpha, 1.0f);                  // unset alpha means 1
  EXPECT_EQ(v->problem.precision, Precision::kFp32);  // AUTO with FLOAT32
  EXPECT_EQ(v->problem.c_type, DataType::kFloat32);
  EXPECT_EQ(v->output_shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(v->output_bytes, 4 * 3 * 4);
  EXPECT_EQ(v->input_bytes, (4 * 5 + 5 * 3) * 4);
  EXPECT_EQ(v->operands.a, r.a().data().data());  // zero copy
  EXPECT_EQ(v->operands.c_in, nullptr);
}

TEST(MatmulValidationTest, TransposesBatchesAndBroadcast) {
  MatmulRequest r;
  Fill(r.mutable_a(), {2, 5, 4}, gemm::v1::DATA_TYPE_FLOAT16, 2);  // [batch, K, M]
  Fill(r.mutable_b(), {3, 5}, gemm::v1::DATA_TYPE_FLOAT16, 2);     // [N, K], shared
  r.set_transpose_a(true);
  r.set_transpose_b(true);
  r.set_alpha(0.0f);
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.batch, 2);
  EXPECT_EQ(v->problem.m, 4);
  EXPECT_EQ(v->problem.n, 3);
  EXPECT_EQ(v->problem.k, 5);
  EXPECT_EQ(v->problem.alpha, 0.0f);  // set alpha is honoured, even 0
  EXPECT_EQ(v->problem.StrideA(), 20);
  EXPECT_EQ(v->problem.StrideB(), 0);
  EXPECT_EQ(v->problem.precision, Precision::kFp16Tensor);  // AUTO with FLOAT16
  EXPECT_EQ(v->output_shape, (std::vector<int64_t>{2, 4, 3}));
}

TEST(MatmulValidationTest, BetaUsesC) {
  MatmulRequest r = Valid();
  r.set_beta(0.5f);
  Fill(r.mutable_c(), {4, 3}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->operands.c_in, r.c().data().data());
  EXPECT_EQ(v->input_bytes, (4 * 5 + 5 * 3 + 4 * 3) * 4);
}

// FP64 is a path of its own: FLOAT64 operands resolve AUTO to it, C is FLOAT64 unless
// asked otherwise (and nothing else is allowed), and alpha/beta keep their FP64 values.
TEST(MatmulValidationTest, Float64OperandsTakeTheFp64Path) {
  MatmulRequest r;
  Fill(r.mutable_a(), {4, 5}, gemm::v1::DATA_TYPE_FLOAT64, 8);
  Fill(r.mutable_b(), {5, 3}, gemm::v1::DATA_TYPE_FLOAT64, 8);
  Fill(r.mutable_c(), {4, 3}, gemm::v1::DATA_TYPE_FLOAT64, 8);
  r.set_alpha_f64(1.0 / 3.0);
  r.set_beta_f64(1e-300);  // beyond FP32's range: still a beta that reads C
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.precision, Precision::kFp64);
  EXPECT_EQ(v->problem.c_type, DataType::kFloat64);
  EXPECT_EQ(v->problem.alpha, 1.0 / 3.0);
  EXPECT_EQ(v->problem.beta, 1e-300);
  EXPECT_EQ(v->operands.c_in, r.c().data().data());
  EXPECT_EQ(v->output_bytes, 4 * 3 * 8);
  EXPECT_EQ(v->input_bytes, (4 * 5 + 5 * 3 + 4 * 3) * 8);

  r.set_precision(gemm::v1::PRECISION_FP64);
  r.set_output_dtype(gemm::v1::DATA_TYPE_FLOAT64);
  EXPECT_TRUE(ValidateMatmul(r, kLimits).ok());

  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  MatmulRequest bad = r;
  bad.set_output_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  ExpectError(bad, kInvalid,
              "output_dtype FLOAT32 is not supported with precision FP64; expected FLOAT64");
  bad = r;
  bad.set_precision(gemm::v1::PRECISION_FP32);
  ExpectError(bad, kInvalid,
              "precision FP32 with FLOAT64 operands: FLOAT64 operands take precision FP64 (or "
              "AUTO), and FP64 takes FLOAT64 operands only");
  bad = Valid();
  bad.set_precision(gemm::v1::PRECISION_FP64);
  ExpectError(bad, kInvalid,
              "precision FP64 with FLOAT32 operands: FLOAT64 operands take precision FP64 (or "
              "AUTO), and FP64 takes FLOAT64 operands only");
  bad = Valid();
  bad.set_output_dtype(gemm::v1::DATA_TYPE_FLOAT64);
  ExpectError(bad, kInvalid,
              "output_dtype FLOAT64 is not supported with precision FP32; expected FLOAT32, "
              "FLOAT16 or BFLOAT16");
  bad = r;
  bad.mutable_b()->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  bad.mutable_b()->set_data(std::string(5 * 3 * 4, '\x01'));
  ExpectError(bad, kInvalid,
              "a.dtype FLOAT64 and b.dtype FLOAT32 differ; both operands must have one dtype");
}

// The FP64 scalars replace the FP32 ones on every path; the FP32 paths compute with them
// rounded to FP32, so a beta that rounds to 0 there does not read C.
TEST(MatmulValidationTest, Fp64ScalarsReplaceTheFp32Ones) {
  MatmulRequest r = Valid();
  r.set_alpha(2.0f);
  r.set_alpha_f64(1.0 / 3.0);
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.alpha, static_cast<double>(1.0f / 3.0f));
  r.set_beta_f64(1e-300);
  v = ValidateMatmul(r, kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.beta, 0.0);
  EXPECT_EQ(v->operands.c_in, nullptr);
  r.set_beta_f64(1e300);
  ExpectError(r, absl::StatusCode::kInvalidArgument,
              "alpha=0.333333 and beta=1e+300 must be finite in FP32 for precision FP32");
}

TEST(MatmulValidationTest, InvalidArgumentCases) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  MatmulRequest r = Valid();
  r.clear_a();
  ExpectError(r, kInvalid, "a is missing (set a or a_ref)");

  r = Valid();
  r.mutable_b()->set_dtype(gemm::v1::DATA_TYPE_UNSPECIFIED);
  ExpectError(r, kInvalid, "b.dtype is unset; expected FLOAT32, FLOAT16, BFLOAT16 or FLOAT64");

  r = Valid();
  r.mutable_a()->set_dtype(static_cast<gemm::v1::DataType>(42));
  ExpectError(r, kInvalid,
              "a.dtype 42 is not a DataType; expected FLOAT32, FLOAT16, BFLOAT16 or "
              "FLOAT64");

  r = Valid();
  r.mutable_a()->set_dtype(gemm::v1::DATA_TYPE_INT8);
  ExpectError(r, kInvalid,
              "a.dtype INT8 is not accepted by Matmul; expected FLOAT32, FLOAT16, BFLOAT16 or "
              "FLOAT64 (integer and quantized operands belong to QuantizedMatmul)");

  r = Valid();
  r.mutable_a()->clear_shape();
  r.mutable_a()->add_shape(20);
  ExpectError(r, kInvalid, "a.shape [20] has rank 1; expected [rows, cols] or [batch, rows, cols]");

  r = Valid();
  r.mutable_a()->add_shape(1);
  r.mutable_a()->add_shape(1);
  ExpectError(r, kInvalid,
              "a.shape [4,5,1,1] has rank 4; expected [rows, cols] or [batch, rows, cols]");

  r = Valid();
  r.mutable_b()->set_shape(0, 0);
  ExpectError(r, kInvalid, "b.shape [0,3] has a dimension <= 0; all must be >= 1");

  r = Valid();
  r.mutable_b()->set_shape(1, -3);
  ExpectError(r, kInvalid, "b.shape [5,-3] has a dimension <= 0; all must be >= 1");

  r = Valid(16, 16, 16);
  r.mutable_a()->mutable_data()->resize(1000);
  ExpectError(r, kInvalid, "a.data has 1000 bytes; shape [16,16] FLOAT32 needs 1024");

  r = Valid();
  Fill(r.mutable_b(), {5, 3}, gemm::v1::DATA_TYPE_FLOAT16, 2);
  r.mutable_b()->clear_shape();
  r.mutable_b()->add_shape(5);
  r.mutable_b()->add_shape(3);
  ExpectError(r, kInvalid,
              "a.dtype FLOAT32 and b.dtype FLOAT16 differ; both operands must have one dtype");

  r = Valid(4, 3, 5);
  r.set_transpose_b(true);  // b [5,3] read as [N=5, K=3]
  ExpectError(r, kInvalid,
              "inner dimensions differ: op(a) is [M=4, K=5] (transpose_a=false) but op(b) is "
              "[K=3, N=5] (transpose_b=true)");

  r = Valid();
  r.clear_a();
  r.clear_b();
  Fill(r.mutable_a(), {2, 4, 5}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  Fill(r.mutable_b(), {3, 5, 3}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  ExpectError(r, kInvalid,
              "batch sizes differ: a has 2, b has 3; they must match, or one operand must be "
              "rank 2 (shared)");

  r = Valid();
  r.set_output_dtype(gemm::v1::DATA_TYPE_INT32);
  ExpectError(r, kInvalid,
              "output_dtype INT32 is not supported with precision FP32; expected FLOAT32, "
              "FLOAT16 or BFLOAT16");

  r = Valid();
  r.set_precision(static_cast<gemm::v1::Precision>(9));
  ExpectError(r, kInvalid,
              "precision 9 is not a Precision; expected AUTO, FP32, FP16_TENSOR or FP64");

  r = Valid();
  r.set_alpha(std::numeric_limits<float>::infinity());
  ExpectError(r, kInvalid, "alpha and beta must be finite; got alpha=inf beta=0");

  r = Valid();
  r.set_beta(0.5f);
  ExpectError(r, kInvalid, "beta is 0.5 but c is missing; send c [M,N] or set beta to 0");

  r = Valid();
  r.set_beta(1.0f);
  Fill(r.mutable_c(), {4, 3}, gemm::v1::DATA_TYPE_FLOAT16, 2);
  ExpectError(r, kInvalid, "c.dtype FLOAT16 must equal the output dtype FLOAT32");

  r = Valid();
  r.set_beta(1.0f);
  Fill(r.mutable_c(), {3, 4}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  ExpectError(r, kInvalid, "c.shape [3,4] does not fit the result: expected [4,3] or [1,4,3]");
}

TEST(MatmulValidationTest, ResourceExhaustedCases) {
  const auto kExhausted = absl::StatusCode::kResourceExhausted;
  // An operand over max_elements: rejected from its shape alone, data never looked at.
  MatmulRequest r = Valid();
  r.mutable_a()->set_shape(0, 2048);
  r.mutable_a()->set_shape(1, 1024);
  ExpectError(r, kExhausted,
              "a.shape [2048,1024] has 2097152 elements; this server accepts at most 1048576 "
              "per operand (--max_elements)");

  // Dimensions whose product overflows int64.
  r = Valid();
  r.mutable_a()->set_shape(0, int64_t{1} << 40);
  r.mutable_a()->set_shape(1, int64_t{1} << 40);
  ExpectError(r, kExhausted,
              "a.shape [1099511627776,1099511627776] has more than 2^63 elements; this server "
              "accepts at most 1048576 per operand (--max_elements)");

  // Small operands, huge result: [2048,1] x [1,2048].
  r = Valid(2048, 2048, 1);
  ExpectError(r, kExhausted,
              "the result C [1,2048,2048] would exceed the 1048576 elements this server "
              "accepts per operand (--max_elements)");

  // A result that fits max_elements but not a response message.
  ValidationLimits small = kLimits;
  small.max_message_bytes = 65536;
  r = Valid(256, 256, 1);
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(r, small);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), kExhausted);
  EXPECT_EQ(v.status().message(),
            "the result C would be 262144 bytes; a response may carry at most 61440 "
            "(--max_message_bytes=65536)");
}

MatmulRequest Planned(int64_t m, int64_t rows, int64_t offset) {
  MatmulRequest r = Valid(m, 3, 5);
  r.mutable_row_plan()->set_rows(rows);
  r.mutable_row_plan()->set_offset(offset);
  return r;
}

TEST(MatmulValidationTest, RowPlansDecodeToTheWholeProductsM) {
  absl::StatusOr<ValidatedMatmul> v = ValidateMatmul(Planned(512, 1300, 512), kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.m, 512);
  EXPECT_EQ(v->problem.plan_m, 1300);
  EXPECT_EQ(v->problem.plan_row0, 512);
  EXPECT_EQ(v->problem.PlanM(), 1300);
  EXPECT_EQ(v->output_shape, (std::vector<int64_t>{512, 3}));
  // The last block may be short; a block may be the whole product.
  v = ValidateMatmul(Planned(276, 1300, 1024), kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.plan_m, 1300);
  v = ValidateMatmul(Planned(7, 7, 0), kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.PlanM(), 7);
  // Without a plan, PlanM() is M.
  v = ValidateMatmul(Valid(), kLimits);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->problem.plan_m, 0);
  EXPECT_EQ(v->problem.PlanM(), 4);
}

TEST(MatmulValidationTest, RowPlanErrors) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  ExpectError(Planned(512, 1300, 100), kInvalid,
              "row_plan {rows=1300 offset=100} for op(a) of 512 rows: offset must be a "
              "multiple of 512");
  ExpectError(Planned(300, 1300, 0), kInvalid,
              "row_plan {rows=1300 offset=0} for op(a) of 300 rows: a block that does not end "
              "the product must have a multiple of 512 rows");
  ExpectError(Planned(512, 1300, 1024), kInvalid,
              "row_plan {rows=1300 offset=1024} for op(a) of 512 rows: the block must lie "
              "inside the planned rows");
  ExpectError(Planned(4, 0, 0), kInvalid,
              "row_plan {rows=0 offset=0} for op(a) of 4 rows: the block must lie inside the "
              "planned rows");
  ExpectError(Planned(4, 1300, -512), kInvalid,
              "row_plan {rows=1300 offset=-512} for op(a) of 4 rows: the block must lie inside "
              "the planned rows");
  MatmulRequest r = Planned(4, 4, 0);
  r.set_transpose_a(true);
  r.mutable_a()->clear_shape();
  r.mutable_a()->add_shape(5);
  r.mutable_a()->add_shape(4);
  ExpectError(r, kInvalid,
              "row_plan {rows=4 offset=0} for op(a) of 4 rows: a planned block's A must not be "
              "transposed");
  r = Planned(4, 4, 0);
  r.set_beta(0.5f);
  Fill(r.mutable_c(), {4, 3}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  ExpectError(r, kInvalid,
              "row_plan {rows=4 offset=0} for op(a) of 4 rows: a planned block must have beta 0");
  r = Planned(4, 4, 0);
  r.mutable_a()->Clear();
  Fill(r.mutable_a(), {2, 4, 5}, gemm::v1::DATA_TYPE_FLOAT32, 4);
  ExpectError(r, kInvalid,
              "row_plan {rows=4 offset=0} for op(a) of 4 rows: a planned block must have "
              "batch 1");
  ExpectError(Planned(512, int64_t{1} << 40, 0), kInvalid,
              "row_plan {rows=1099511627776 offset=0} for op(a) of 512 rows: the planned product "
              "is too large");
}

}  // namespace
}  // namespace gemmd
