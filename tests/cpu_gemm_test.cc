// The CPU backend against the FP64 reference on edge-straddling shapes, every transpose,
// alpha/beta, batches with broadcast, all input dtypes, both precisions.
#include "kernels/cpu/cpu_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/half.h"
#include "kernels/reference_gemm.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::NanBytes;
using ::gemmd::testing::RandomBytes;
using ::gemmd::testing::TestSeed;

struct Case {
  int64_t batch, m, n, k;
  bool ta, tb;
  double alpha, beta;
  DataType in_type;
  Precision precision;
  DataType out_type = DataType::kFloat32;
  bool broadcast_b = false;
};

// Keeps gtest from printing the struct's bytes in test names.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.batch << "x" << c.m << "x" << c.n << "x" << c.k;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(info.index, "_b", c.batch, "_", c.m, "x", c.n, "x", c.k, c.ta ? "_ta" : "",
                      c.tb ? "_tb" : "", "_", DataTypeName(c.in_type), "_",
                      PrecisionName(c.precision), c.beta != 0 ? "_beta" : "", "_out",
                      DataTypeName(c.out_type), c.broadcast_b ? "_bcastB" : "");
}

// Documented tolerances (docs/ARCHITECTURE.md, "Numerics") for N(0,1) data.
double Tolerance(const Case& c) {
  // FP64 against a long-double reference: about sqrt(K) roundings of 2^-53 each.
  if (c.precision == Precision::kFp64) return 1e-13;
  double tol = 1e-5;
  if (c.precision == Precision::kFp16Tensor && c.in_type == DataType::kFloat32) tol = 1e-3;
  if (c.out_type == DataType::kFloat16) tol = std::max(tol, 1e-3);
  if (c.out_type == DataType::kBFloat16) tol = std::max(tol, 8e-3);
  return tol;
}

class CpuGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(CpuGemmTest, MatchesFp64Reference) {
  const Case& c = GetParam();
  const uint64_t seed = TestSeed(1000 + c.m * 7 + c.n * 13 + c.k * 17 + c.batch);
  SCOPED_TRACE(absl::StrCat("seed=", seed, " (set GEMM_TEST_SEED to replay)"));
  std::mt19937_64 rng(seed);

  GemmProblem p;
  p.batch = c.batch;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.transpose_a = c.ta;
  p.transpose_b = c.tb;
  p.a_type = p.b_type = c.in_type;
  p.c_type = c.out_type;
  p.precision = c.precision;
  p.alpha = c.alpha;
  p.beta = c.beta;
  if (c.broadcast_b) p.batch_stride_b = 0;

  const std::string a = RandomBytes(c.in_type, p.ElementsA(), rng);
  const std::string b = RandomBytes(c.in_type, p.ElementsB(), rng);
  const std::string c_in = RandomBytes(c.out_type, p.ElementsCIn(), rng);
  std::string out = NanBytes(c.out_type, p.ElementsC());  // poison: every value must be written

  const GemmOperands ops{a.data(), b.data(), c.beta != 0 ? c_in.data() : nullptr, out.data()};
  ASSERT_TRUE(CpuGemm(p, ops).ok());
  const std::vector<double> ref = ReferenceGemm(p, ops);
  const double err = RelativeError(ref.data(), out.data(), c.out_type, p.ElementsC());
  EXPECT_LE(err, Tolerance(c)) << "rel_error=" << err;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const DataType f32 = DataType::kFloat32, f16 = DataType::kFloat16, bf16 = DataType::kBFloat16;
  const Precision fp32 = Precision::kFp32, tensor = Precision::kFp16Tensor;
  for (int64_t s : {1, 15, 17, 127, 129}) {
    cases.push_back({1, s, s, s, false, false, 1.0f, 0.0f, f32, fp32});
  }
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      cases.push_back({1, 17, 15, 33, ta, tb, 1.0f, 0.0f, f32, fp32});
      cases.push_back({1, 129, 127, 65, ta, tb, -0.5f, 2.0f, f32, tensor});
    }
  }
  cases.push_back({1, 1, 129, 257, false, false, 1.0f, 0.0f, f32, fp32});  // skinny
  cases.push_back({1, 127, 1, 31, false, true, 1.0f, 0.0f, f32, fp32});    // odd K, N=1
  cases.push_back({3, 31, 17, 19, false, false, 1.5f, 0.25f, f32, fp32});  // batched
  cases.push_back({4, 16, 16, 16, true, false, 1.0f, 0.0f, f32, fp32, f32, true});
  cases.push_back({1, 64, 64, 4096, false, false, 1.0f, 0.0f, f32, tensor});  // long K
  cases.push_back({2, 33, 65, 129, false, true, 1.0f, 0.0f, f16, tensor});
  cases.push_back({2, 33, 65, 129, false, false, 1.0f, 0.5f, bf16, tensor});
  cases.push_back({1, 33, 65, 129, true, false, 1.0f, 0.0f, f16, fp32});
  cases.push_back({1, 33, 65, 129, false, false, 1.0f, 1.0f, f32, fp32, f16});
  cases.push_back({1, 33, 65, 129, false, false, 1.0f, 0.0f, bf16, tensor, bf16});
  const DataType f64 = DataType::kFloat64;
  const Precision fp64 = Precision::kFp64;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      cases.push_back({1, 129, 127, 65, ta, tb, 1.0 / 3.0, -0.1, f64, fp64, f64});
    }
  }
  cases.push_back({1, 1, 257, 4099, false, false, 1.0, 0.0, f64, fp64, f64});  // long K, skinny
  cases.push_back({3, 31, 17, 19, false, false, 1.5, 0.25, f64, fp64, f64});   // batched
  cases.push_back({4, 16, 16, 16, true, false, 1.0, 0.0, f64, fp64, f64, true});
  cases.push_back({1, 33, 65, 129, false, false, 0.0, 0.7, f64, fp64, f64});  // alpha = 0
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuGemmTest, ::testing::ValuesIn(Cases()), CaseName);

// The tensor path must round FP32 inputs to FP16: its result matches FP64 on the rounded
// operands to FP32 accuracy, and differs from FP64 on the originals by the FP16 loss.
TEST(CpuGemmTensorEmulationTest, RoundsFp32InputsToHalf) {
  std::mt19937_64 rng(TestSeed(77));
  GemmProblem p;
  p.m = 64;
  p.n = 64;
  p.k = 256;
  p.precision = Precision::kFp16Tensor;
  std::string a = RandomBytes(DataType::kFloat32, p.ElementsA(), rng);
  std::string b = RandomBytes(DataType::kFloat32, p.ElementsB(), rng);
  std::vector<float> out(static_cast<size_t>(p.m * p.n));
  ASSERT_TRUE(CpuGemm(p, {a.data(), b.data(), nullptr, out.data()}).ok());

  const auto ref_original = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  for (std::string* s : {&a, &b}) {
    float* f = reinterpret_cast<float*>(s->data());
    for (size_t i = 0; i < s->size() / 4; ++i) f[i] = RoundToHalf(f[i]);
  }
  const auto ref_rounded = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  const int64_t count = p.m * p.n;
  EXPECT_LE(RelativeError(ref_rounded.data(), out.data(), DataType::kFloat32, count), 1e-6);
  EXPECT_GE(RelativeError(ref_original.data(), out.data(), DataType::kFloat32, count), 5e-5);
}

TEST(CpuGemmTest, InPlaceBetaUsesOutputAsInput) {
  const std::vector<float> a = {1, 2}, b = {3, 4};  // [1,2] x [2,1]
  std::vector<float> c = {100};
  GemmProblem p;
  p.m = 1;
  p.n = 1;
  p.k = 2;
  p.beta = 0.5f;
  ASSERT_TRUE(CpuGemm(p, {a.data(), b.data(), c.data(), c.data()}).ok());
  EXPECT_EQ(c[0], 11.0f + 50.0f);
}

// A planned row block (GemmProblem::plan_m) is the whole product's rows to the bit: each
// block on a 512-row panel boundary, the short last one included, whose own size alone
// would have run on one thread where the whole product's panels run on all of them.
TEST(CpuGemmTest, PlannedRowBlocksAreTheWholeProductsRowsBitForBit) {
  GemmProblem whole;
  whole.m = 1300;
  whole.n = 150;
  whole.k = 150;
  whole.alpha = 0.75f;
  std::mt19937_64 rng(TestSeed(20261205));
  const std::string a = RandomBytes(DataType::kFloat32, whole.m * whole.k, rng);
  const std::string b = RandomBytes(DataType::kFloat32, whole.k * whole.n, rng);
  std::vector<float> c_whole(static_cast<size_t>(whole.m * whole.n));
  ASSERT_TRUE(CpuGemm(whole, {a.data(), b.data(), nullptr, c_whole.data()}).ok());
  std::vector<float> c_blocks(c_whole.size());
  for (int64_t row0 = 0; row0 < whole.m; row0 += kRowPlanAlign) {
    GemmProblem block = whole;
    block.m = std::min(kRowPlanAlign, whole.m - row0);
    block.plan_m = whole.m;
    block.plan_row0 = row0;
    ASSERT_TRUE(CpuGemm(block, {a.data() + row0 * whole.k * 4, b.data(), nullptr,
                                c_blocks.data() + row0 * whole.n})
                    .ok());
  }
  EXPECT_EQ(std::memcmp(c_whole.data(), c_blocks.data(), c_whole.size() * sizeof(float)), 0);
}

TEST(CpuGemmTest, RejectsWhatItCannotRun) {
  const std::vector<float> x(4, 1.0f);
  std::vector<float> out(4);
  GemmProblem p;
  p.m = p.n = p.k = 2;
  p.beta = 1.0f;
  absl::Status s = CpuGemm(p, {x.data(), x.data(), nullptr, out.data()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "beta != 0 needs a C input");
  p.beta = 0.0f;
  p.a_type = DataType::kInt8;
  s = CpuGemm(p, {x.data(), x.data(), nullptr, out.data()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  p.a_type = DataType::kFloat32;
  p.k = int64_t{1} << 32;
  EXPECT_EQ(CpuGemm(p, {x.data(), x.data(), nullptr, out.data()}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmd
