// Which kernel family serves a QuantizedMatmul on a GPU (server/quantized_plan.h).
#include "server/quantized_plan.h"

#include <gtest/gtest.h>

#include <memory>

#include "server/batch.h"

namespace gemmd {
namespace {

QuantizedOperands Operands(int64_t m, int64_t k, std::optional<QuantFormat> a,
                           QuantFormat b, DataType a_dense = DataType::kFloat16) {
  QuantizedOperands q;
  q.m = m;
  q.n = 4096;
  q.k = k;
  if (a) q.a = QuantizedOperand{*a, {}, {}, 1.0f};
  q.a_dense_type = a_dense;
  q.b.format = b;
  return q;
}

TEST(QuantizedPlanTest, FewRowsGoToTheSkinnyKernelWhateverA) {
  EXPECT_EQ(PlanQuantized(Operands(1, 8192, std::nullopt, QuantFormat::kNvfp4)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(16, 8192, QuantFormat::kInt8, QuantFormat::kInt8)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(16, 48, std::nullopt, QuantFormat::kNvfp4,
                                   DataType::kFloat32)),
            QuantizedPath::kSkinny);
}

// FP16 x NVFP4 has the skinny kernel's streaming path up to 64 rows, then the square kernel.
TEST(QuantizedPlanTest, Fp16ActivationsAgainstNvfp4StaySkinnyUpTo64Rows) {
  EXPECT_EQ(PlanQuantized(Operands(17, 8192, std::nullopt, QuantFormat::kNvfp4)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(64, 8192, std::nullopt, QuantFormat::kNvfp4)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(65, 8192, std::nullopt, QuantFormat::kNvfp4)),
            QuantizedPath::kSquareFp16A);
  // Not for a quantized A: past 16 rows it keeps the square kernel.
  EXPECT_EQ(PlanQuantized(Operands(17, 4096, QuantFormat::kNvfp4, QuantFormat::kNvfp4)),
            QuantizedPath::kSquare);
}

TEST(QuantizedPlanTest, LargerProblemsGoToTheSquareKernelsWhereTheyTakeTheOperands) {
  EXPECT_EQ(PlanQuantized(Operands(17, 4096, QuantFormat::kInt8, QuantFormat::kInt8)),
            QuantizedPath::kSquare);
  EXPECT_EQ(PlanQuantized(Operands(4096, 4096, QuantFormat::kNvfp4, QuantFormat::kNvfp4)),
            QuantizedPath::kSquare);
  EXPECT_EQ(PlanQuantized(Operands(4096, 4096, std::nullopt, QuantFormat::kNvfp4)),
            QuantizedPath::kSquareFp16A);
  // NVFP4 K % 32 != 0, INT8 K % 16 != 0, mixed formats: skinny up to 64 rows ...
  EXPECT_EQ(PlanQuantized(Operands(64, 48, QuantFormat::kNvfp4, QuantFormat::kNvfp4)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(40, 100, std::nullopt, QuantFormat::kInt8)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(64, 4096, QuantFormat::kInt8, QuantFormat::kNvfp4)),
            QuantizedPath::kSkinny);
  // ... BF16 activations too ...
  EXPECT_EQ(PlanQuantized(Operands(1, 4096, std::nullopt, QuantFormat::kNvfp4,
                                   DataType::kBFloat16)),
            QuantizedPath::kSkinny);
  EXPECT_EQ(PlanQuantized(Operands(64, 4096, std::nullopt, QuantFormat::kInt8,
                                   DataType::kBFloat16)),
            QuantizedPath::kSkinny);
  // ... and the host beyond that.
  EXPECT_EQ(PlanQuantized(Operands(65, 48, QuantFormat::kNvfp4, QuantFormat::kNvfp4)),
            QuantizedPath::kHostDequantize);
  EXPECT_EQ(PlanQuantized(Operands(4096, 4096, std::nullopt, QuantFormat::kInt8)),
            QuantizedPath::kHostDequantize);
  EXPECT_EQ(PlanQuantized(Operands(65, 4096, std::nullopt, QuantFormat::kNvfp4,
                                   DataType::kBFloat16)),
            QuantizedPath::kHostDequantize);
  EXPECT_STREQ(QuantizedPathName(QuantizedPath::kSquareFp16A), "square_fp16_a");
}

TEST(QuantizedPlanTest, TakesSaysWhyAKernelFamilyCannotRunTheOperands) {
  EXPECT_TRUE(QuantizedPathTakes(QuantizedPath::kSkinny,
                                 Operands(64, 48, std::nullopt, QuantFormat::kNvfp4))
                  .ok());
  const absl::Status rows = QuantizedPathTakes(
      QuantizedPath::kSkinny, Operands(65, 48, std::nullopt, QuantFormat::kNvfp4));
  EXPECT_EQ(rows.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rows.message(), "the skinny kernel takes M <= 64; M is 65");
  const absl::Status k = QuantizedPathTakes(
      QuantizedPath::kSquare, Operands(128, 48, QuantFormat::kNvfp4, QuantFormat::kNvfp4));
  EXPECT_EQ(k.message(), "the square NVFP4 kernels take K % 32 == 0; K is 48");
  EXPECT_EQ(QuantizedPathTakes(QuantizedPath::kSquare,
                               Operands(128, 64, QuantFormat::kInt8, QuantFormat::kNvfp4))
                .message(),
            "the square kernel takes A and B quantized in the same format");
  EXPECT_EQ(QuantizedPathTakes(QuantizedPath::kSquareFp16A,
                               Operands(128, 64, std::nullopt, QuantFormat::kNvfp4,
                                        DataType::kFloat32))
                .message(),
            "the FP16 x NVFP4 kernel takes a dense FLOAT16 A and an NVFP4 B");
  EXPECT_EQ(QuantizedPathTakes(QuantizedPath::kSkinny,
                               Operands(4, 64, std::nullopt, QuantFormat::kNvfp4, DataType::kInt8))
                .message(),
            "the skinny kernel takes FLOAT16, FLOAT32 or BFLOAT16 activations (or a quantized A)");
  EXPECT_TRUE(QuantizedPathTakes(QuantizedPath::kHostDequantize,
                                 Operands(100000, 3, std::nullopt, QuantFormat::kInt8,
                                          DataType::kBFloat16))
                  .ok());
}

TEST(QuantizedPlanTest, PackedQuantizedJobsRunAlone) {
  Job dense, packed;
  dense.problem.m = packed.problem.m = 4;
  packed.quantized = std::make_shared<const QuantizedOperands>();
  EXPECT_TRUE(IsBatchable(dense));
  EXPECT_FALSE(IsBatchable(packed));
  EXPECT_FALSE(BatchKeyOf(dense) == BatchKeyOf(packed));
}

}  // namespace
}  // namespace gemmd
