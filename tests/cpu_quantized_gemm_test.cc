// The CPU weight-only quantized GEMM against the FP64 product of A and the dequantized
// weight (the kernel, not the format's loss): 1e-5 relative (Frobenius), FP32 SGEMM on
// exact dequantized values. Shapes cross tile boundaries (tiles of max(64, 2^20 / K)
// rows, a multiple of 16) and use unaligned operand bytes, as protobuf fields may be.
#include "kernels/cpu/cpu_quantized_gemm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

struct Case {
  QuantFormat format;
  DataType a_type;
  int64_t m, n, k;
};

// The weight as it comes on the wire, one byte off 4-byte alignment, and its values.
struct Wire {
  std::string data, scales;  // each with a leading pad byte
  float tensor_scale = 1.0f;
  std::vector<float> dequantized;
};

Wire Quantize(QuantFormat format, int64_t n, int64_t k, std::mt19937_64& rng) {
  const std::string bytes = testing::RandomBytes(DataType::kFloat32, n * k, rng);
  const float* w = reinterpret_cast<const float*>(bytes.data());
  Wire out;
  out.dequantized.resize(static_cast<size_t>(n * k));
  if (format == QuantFormat::kInt8) {
    const Int8Matrix q = *QuantizeInt8(w, n, k);
    DequantizeInt8(q, out.dequantized.data());
    out.data = std::string(1, '\0') +
               std::string(reinterpret_cast<const char*>(q.values.data()), q.values.size());
    out.scales = std::string(1, '\0') +
                 std::string(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4);
  } else {
    const Nvfp4Matrix q = *QuantizeNvfp4(w, n, k);
    EXPECT_TRUE(DequantizeNvfp4(q, out.dequantized.data()).ok());
    out.data = std::string(1, '\0') +
               std::string(reinterpret_cast<const char*>(q.packed.data()), q.packed.size());
    out.scales =
        std::string(1, '\0') +
        std::string(reinterpret_cast<const char*>(q.block_scales.data()), q.block_scales.size());
    out.tensor_scale = q.tensor_scale;
  }
  return out;
}

PackedWeight Packed(const Wire& w, QuantFormat format, int64_t n, int64_t k) {
  return {format, w.data.data() + 1, w.scales.data() + 1, w.tensor_scale, n, k};
}

class CpuWeightOnlyGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(CpuWeightOnlyGemmTest, MatchesTheDequantizedProduct) {
  const Case c = GetParam();
  std::mt19937_64 rng(testing::TestSeed(17));
  const Wire w = Quantize(c.format, c.n, c.k, rng);
  // A one byte off alignment too.
  const std::string a = std::string(1, '\0') + testing::RandomBytes(c.a_type, c.m * c.k, rng);
  std::vector<float> a_values(static_cast<size_t>(c.m * c.k));
  for (int64_t i = 0; i < c.m * c.k; ++i) {
    a_values[i] = static_cast<float>(LoadAsDouble(a.data() + 1, c.a_type, i));
  }
  std::vector<float> out(static_cast<size_t>(c.m * c.n), -1.0f);
  ASSERT_TRUE(
      CpuWeightOnlyGemm(a.data() + 1, c.a_type, c.m, Packed(w, c.format, c.n, c.k), out.data())
          .ok());
  GemmProblem p;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.transpose_b = true;
  const std::vector<double> ref =
      ReferenceGemm(p, {a_values.data(), w.dequantized.data(), nullptr, nullptr});
  EXPECT_LE(RelativeError(ref.data(), out.data(), DataType::kFloat32, c.m * c.n), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuWeightOnlyGemmTest,
    ::testing::Values(Case{QuantFormat::kNvfp4, DataType::kFloat16, 1, 17, 32},
                      Case{QuantFormat::kNvfp4, DataType::kFloat32, 16, 300, 4096},  // 2 tiles
                      Case{QuantFormat::kNvfp4, DataType::kBFloat16, 7, 129, 16},
                      Case{QuantFormat::kInt8, DataType::kFloat32, 3, 1000, 1040},  // 2 tiles
                      Case{QuantFormat::kInt8, DataType::kFloat16, 64, 65, 77}),
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return absl::StrCat(QuantFormatName(c.format), "_", DataTypeName(c.a_type), "_", c.m, "x",
                          c.n, "x", c.k);
    });

TEST(CpuWeightOnlyGemmArgsTest, RefusesWhatItCannotRun) {
  std::mt19937_64 rng(5);
  Wire w = Quantize(QuantFormat::kNvfp4, 4, 32, rng);
  const std::string a(2 * 32 * 4, '\0');
  std::vector<float> out(8, -1.0f);
  const PackedWeight b = Packed(w, QuantFormat::kNvfp4, 4, 32);

  absl::Status s = CpuWeightOnlyGemm(a.data(), DataType::kInt8, 2, b, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "weight-only quantized GEMM takes FLOAT32, FLOAT16 or BFLOAT16 activations, not INT8");

  s = CpuWeightOnlyGemm(a.data(), DataType::kFloat32, 0, b, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);

  PackedWeight odd_k = b;
  odd_k.k = 24;
  s = CpuWeightOnlyGemm(a.data(), DataType::kFloat32, 1, odd_k, out.data());
  EXPECT_EQ(s.message(), "NVFP4 needs K to be a multiple of 16; K is 24");

  // A NaN scale (0x7F) in row 3, block 1: refused before C is touched.
  w.scales[1 + 3 * 2 + 1] = 0x7F;
  s = CpuWeightOnlyGemm(a.data(), DataType::kFloat32, 2, Packed(w, QuantFormat::kNvfp4, 4, 32),
                        out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "[3, 1]")) << s.message();
  for (float v : out) EXPECT_EQ(v, -1.0f);
}

}  // namespace
}  // namespace gemmd
