#include "kernels/reference_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace gemmd {
namespace {

GemmProblem Small(int64_t m, int64_t n, int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

TEST(ReferenceGemmTest, HandComputed2x3x2) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};     // [2,3]
  const std::vector<float> b = {7, 8, 9, 10, 11, 12};  // [3,2]
  GemmProblem p = Small(2, 2, 3);
  const auto c = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  EXPECT_EQ(c, (std::vector<double>{58, 64, 139, 154}));
}

TEST(ReferenceGemmTest, TransposesReadTheStoredLayout) {
  const std::vector<float> at = {1, 4, 2, 5, 3, 6};     // A^T stored [3,2]
  const std::vector<float> bt = {7, 9, 11, 8, 10, 12};  // B^T stored [2,3]
  GemmProblem p = Small(2, 2, 3);
  p.transpose_a = true;
  p.transpose_b = true;
  const auto c = ReferenceGemm(p, {at.data(), bt.data(), nullptr, nullptr});
  EXPECT_EQ(c, (std::vector<double>{58, 64, 139, 154}));
}

TEST(ReferenceGemmTest, AlphaBetaAndBroadcast) {
  // Two batch items of A against one broadcast B (stride 0), C = 2*A*B - C_in.
  const std::vector<float> a = {1, 2, 3, 4};  // [2 items, 1, 2]
  const std::vector<float> b = {10, 100};     // [2, 1]
  const std::vector<float> c_in = {1, 2};
  GemmProblem p = Small(1, 1, 2);
  p.batch = 2;
  p.batch_stride_b = 0;
  p.alpha = 2.0f;
  p.beta = -1.0f;
  const auto c = ReferenceGemm(p, {a.data(), b.data(), c_in.data(), nullptr});
  EXPECT_EQ(c, (std::vector<double>{2 * 210.0 - 1, 2 * 430.0 - 2}));
}

TEST(ReferenceGemmTest, BetaZeroIgnoresCInput) {
  const std::vector<float> a = {1}, b = {2}, c_in = {std::nanf("")};
  GemmProblem p = Small(1, 1, 1);
  const auto c = ReferenceGemm(p, {a.data(), b.data(), c_in.data(), nullptr});
  EXPECT_EQ(c[0], 2.0);
}

TEST(ReferenceGemmTest, SampledRowsMatchWholeProblem) {
  std::vector<float> a(5 * 4), b(4 * 3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f - 3;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) - 5;
  GemmProblem p = Small(5, 3, 4);
  const GemmOperands ops{a.data(), b.data(), nullptr, nullptr};
  const auto all = ReferenceGemm(p, ops);
  std::vector<double> rows(2 * 3);
  ReferenceGemmRows(p, ops, 0, 2, 4, rows.data());
  EXPECT_EQ(rows, std::vector<double>(all.begin() + 6, all.begin() + 12));
}

// Large enough to take several threads (and the batch's two items, one broadcast B): the
// same sums as each row computed on its own.
TEST(ReferenceGemmTest, ThreadedRowsMatchRowByRow) {
  GemmProblem p = Small(67, 256, 1024);
  p.batch = 2;
  p.batch_stride_b = 0;
  std::vector<float> a(p.batch * p.m * p.k), b(p.k * p.n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 97) * 0.37f - 17;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 89) * 0.11f - 4.5f;
  const GemmOperands ops{a.data(), b.data(), nullptr, nullptr};
  const auto all = ReferenceGemm(p, ops);
  ASSERT_EQ(all.size(), static_cast<size_t>(p.batch * p.m * p.n));
  std::vector<double> row(p.n);
  for (int64_t item = 0; item < p.batch; ++item) {
    for (int64_t i = 0; i < p.m; ++i) {
      ReferenceGemmRows(p, ops, item, i, i + 1, row.data());
      ASSERT_EQ(row, std::vector<double>(all.begin() + (item * p.m + i) * p.n,
                                         all.begin() + (item * p.m + i + 1) * p.n))
          << "item " << item << " row " << i;
    }
  }
}

TEST(RelativeErrorTest, FrobeniusNorm) {
  const std::vector<double> ref = {3, 4};
  const std::vector<float> same = {3, 4}, off = {3, 4.5f}, nan = {std::nanf(""), 4};
  EXPECT_EQ(RelativeError(ref.data(), same.data(), DataType::kFloat32, 2), 0.0);
  EXPECT_DOUBLE_EQ(RelativeError(ref.data(), off.data(), DataType::kFloat32, 2), 0.1);
  EXPECT_TRUE(std::isnan(RelativeError(ref.data(), nan.data(), DataType::kFloat32, 2)));
  const std::vector<double> zero = {0, 0};
  EXPECT_TRUE(std::isinf(RelativeError(zero.data(), off.data(), DataType::kFloat32, 2)));
}

}  // namespace
}  // namespace gemmd
