// The INT8 and NVFP4 formats against their spec (kernels/quant_formats.h): every code and scale byte, rounding,
// hand-written vectors, idempotence, errors, and the loss on N(0,1) data.
#include "kernels/quant_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

TEST(E2m1Test, EveryCodeDecodes) {
  const float magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int code = 0; code < 16; ++code) {
    const float expected = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    EXPECT_EQ(DecodeE2m1(static_cast<uint8_t>(code)), expected) << code;
    // The spec's formula: sign * (e == 0 ? m * 0.5 : (1 + m / 2) * 2^(e - 1)).
    const int e = (code >> 1) & 3, m = code & 1;
    const float formula = (e == 0 ? m * 0.5f : (1.0f + m / 2.0f) * std::ldexp(1.0f, e - 1)) *
                          ((code & 8) ? -1.0f : 1.0f);
    EXPECT_EQ(DecodeE2m1(static_cast<uint8_t>(code)), formula) << code;
  }
}

TEST(E2m1Test, RoundsToNearestTiesToEvenAndClamps) {
  for (int code = 0; code < 16; ++code) {
    const float v = DecodeE2m1(static_cast<uint8_t>(code));
    EXPECT_EQ(EncodeE2m1(v), code) << v;  // every grid point encodes to itself
  }
  // Midpoints go to the even code (mantissa bit 0).
  EXPECT_EQ(EncodeE2m1(0.25f), 0);
  EXPECT_EQ(EncodeE2m1(0.75f), 2);
  EXPECT_EQ(EncodeE2m1(1.25f), 2);
  EXPECT_EQ(EncodeE2m1(1.75f), 4);
  EXPECT_EQ(EncodeE2m1(2.5f), 4);
  EXPECT_EQ(EncodeE2m1(3.5f), 6);
  EXPECT_EQ(EncodeE2m1(5.0f), 6);
  EXPECT_EQ(EncodeE2m1(-5.0f), 14);
  EXPECT_EQ(EncodeE2m1(0.26f), 1);
  EXPECT_EQ(EncodeE2m1(5.01f), 7);
  EXPECT_EQ(EncodeE2m1(100.0f), 7);
  EXPECT_EQ(EncodeE2m1(-100.0f), 15);
}

TEST(E4m3Test, EveryByteDecodes) {
  for (int byte = 0; byte < 256; ++byte) {
    const int e = (byte >> 3) & 15, m = byte & 7;
    const float v = DecodeE4m3(static_cast<uint8_t>(byte));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << byte;
      continue;
    }
    const double magnitude =
        e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
    EXPECT_EQ(v, static_cast<float>((byte & 0x80) ? -magnitude : magnitude)) << byte;
  }
  EXPECT_EQ(DecodeE4m3(0x38), 1.0f);
  EXPECT_EQ(DecodeE4m3(0x7E), 448.0f);
  EXPECT_EQ(DecodeE4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(DecodeE4m3(0x08), std::ldexp(1.0f, -6));
}

TEST(E4m3Test, EncodesRepresentableValuesExactlyAndRoundsHalfToEven) {
  for (int byte = 0; byte < 0x7F; ++byte) {
    EXPECT_EQ(EncodeE4m3(DecodeE4m3(static_cast<uint8_t>(byte))), byte) << byte;
  }
  // Between 1.0 (0x38) and 1.125 (0x39): the midpoint goes to the even mantissa.
  EXPECT_EQ(EncodeE4m3(1.0625f), 0x38);
  EXPECT_EQ(EncodeE4m3(1.1875f), 0x3A);  // between 1.125 (0x39) and 1.25 (0x3A)
  EXPECT_EQ(EncodeE4m3(1.07f), 0x39);
  // Subnormal steps of 2^-9; 7.5 steps is a tie between 0x07 and 0x08 (even: 0x08).
  EXPECT_EQ(EncodeE4m3(std::ldexp(7.5f, -9)), 0x08);
  EXPECT_EQ(EncodeE4m3(std::ldexp(0.5f, -9)), 0x00);
  EXPECT_EQ(EncodeE4m3(1000.0f), 0x7E);  // clamped to 448, never the NaN byte
  EXPECT_EQ(EncodeE4m3(460.0f), 0x7E);
  EXPECT_EQ(EncodeE4m3(0.0f), 0x00);
}

TEST(Int8Test, HandWrittenRowsRoundTrip) {
  // Row 0: amax 127 -> scale 1, values stay; row 1: amax 2.54 -> scale 0.02;
  // row 2: all zero -> scale 1, zeros.
  const std::vector<float> x = {127, -1, 0.5, 1.5, 2.54f, -1.27f, 0.01f, 0.03f, 0, 0, 0, 0};
  absl::StatusOr<Int8Matrix> q = QuantizeInt8(x.data(), 3, 4);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->scales, (std::vector<float>{1.0f, 2.54f / 127.0f, 1.0f}));
  // 0.5 -> 0 and 1.5 -> 2: half to even.
  EXPECT_EQ(q->values, (std::vector<int8_t>{127, -1, 0, 2, 127, -64, 0, 2, 0, 0, 0, 0}));
  std::vector<float> back(12);
  DequantizeInt8(*q, back.data());
  EXPECT_EQ(back[0], 127.0f);
  EXPECT_EQ(back[3], 2.0f);
  EXPECT_FLOAT_EQ(back[4], 2.54f);
}

TEST(Int8Test, QuantizeOfDequantizedIsIdentity) {
  std::mt19937_64 rng(testing::TestSeed(21));
  const std::string bytes = testing::RandomBytes(DataType::kFloat32, 64 * 96, rng);
  const float* x = reinterpret_cast<const float*>(bytes.data());
  absl::StatusOr<Int8Matrix> q = QuantizeInt8(x, 64, 96);
  ASSERT_TRUE(q.ok());
  std::vector<float> deq(64 * 96);
  DequantizeInt8(*q, deq.data());
  absl::StatusOr<Int8Matrix> again = QuantizeInt8(deq.data(), 64, 96);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->values, q->values);
}

TEST(Nvfp4Test, HandWrittenBlockEncodesBitExactly) {
  // One row, one block of grid values times 1.75 (so every step below is exact): amax
  // 10.5 -> g = 10.5 / 2688 = 2^-8; block scale e4m3(10.5 / 6 / g) = 448 (0x7E); each
  // x / (448 * g) = x / 1.75 lands on the E2M1 grid, with ties (2.5, 0.25, 0.75).
  std::vector<float> x = {6, -0.5, 1, 1.5, 2.5, -3, 4, 0, 0.25, 0.75, -6, 2, 3, -4, 1, 0};
  for (float& v : x) v *= 1.75f;
  absl::StatusOr<Nvfp4Matrix> q = QuantizeNvfp4(x.data(), 1, 16);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->tensor_scale, std::ldexp(1.0f, -8));
  EXPECT_EQ(q->block_scales, (std::vector<uint8_t>{0x7E}));
  // Codes: 6->7, -0.5->9, 1->2, 1.5->3, 2.5->4, -3->13, 4->6, 0->0, 0.25->0, 0.75->2,
  // -6->15, 2->4, 3->5, -4->14, 1->2, 0->0; even index in the low nibble.
  EXPECT_EQ(q->packed, (std::vector<uint8_t>{0x97, 0x32, 0xD4, 0x06, 0x20, 0x4F, 0xE5, 0x02}));
  std::vector<float> back(16);
  ASSERT_TRUE(DequantizeNvfp4(*q, back.data()).ok());
  EXPECT_EQ(back[0], 10.5f);
  EXPECT_EQ(back[4], 3.5f);  // 2.5 * 1.75 rounded to 2 * 1.75
  EXPECT_EQ(back[10], -10.5f);
}

TEST(Nvfp4Test, AllZeroTensorAndErrors) {
  std::vector<float> zeros(32, 0.0f);
  absl::StatusOr<Nvfp4Matrix> q = QuantizeNvfp4(zeros.data(), 2, 16);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->tensor_scale, 1.0f);
  EXPECT_EQ(q->block_scales, std::vector<uint8_t>(2, 0));
  EXPECT_EQ(q->packed, std::vector<uint8_t>(16, 0));

  const absl::Status bad_k = QuantizeNvfp4(zeros.data(), 1, 24).status();
  EXPECT_EQ(bad_k.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_k.message(), "multiple of 16")) << bad_k;
  std::vector<float> nan(16, 1.0f);
  nan[5] = std::nanf("");
  EXPECT_EQ(QuantizeNvfp4(nan.data(), 1, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
  nan[5] = INFINITY;
  EXPECT_EQ(QuantizeInt8(nan.data(), 1, 16).status().code(), absl::StatusCode::kInvalidArgument);

  q->block_scales[1] = 0x7F;  // NaN in E4M3
  std::vector<float> out(32);
  const absl::Status nan_scale = DequantizeNvfp4(*q, out.data());
  EXPECT_EQ(nan_scale.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(nan_scale.message(), "0x7f")) << nan_scale;
  q->block_scales.pop_back();
  EXPECT_EQ(DequantizeNvfp4(*q, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Nvfp4Test, QuantizeOfDequantizedIsIdentity) {
  std::mt19937_64 rng(testing::TestSeed(22));
  const std::string bytes = testing::RandomBytes(DataType::kFloat32, 32 * 128, rng);
  const float* x = reinterpret_cast<const float*>(bytes.data());
  absl::StatusOr<Nvfp4Matrix> q = QuantizeNvfp4(x, 32, 128);
  ASSERT_TRUE(q.ok());
  std::vector<float> deq(32 * 128);
  ASSERT_TRUE(DequantizeNvfp4(*q, deq.data()).ok());
  absl::StatusOr<Nvfp4Matrix> again = QuantizeNvfp4(deq.data(), 32, 128);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->packed, q->packed);
  EXPECT_EQ(again->block_scales, q->block_scales);
  EXPECT_EQ(again->tensor_scale, q->tensor_scale);
  std::vector<float> deq2(32 * 128);
  ASSERT_TRUE(DequantizeNvfp4(*again, deq2.data()).ok());
  EXPECT_EQ(deq2, deq);
}

// Relative Frobenius error of the round trip on N(0,1) data, per format.
double FormatError(bool nvfp4, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::string bytes = testing::RandomBytes(DataType::kFloat32, rows * cols, rng);
  const float* x = reinterpret_cast<const float*>(bytes.data());
  std::vector<float> back(static_cast<size_t>(rows * cols));
  if (nvfp4) {
    EXPECT_TRUE(DequantizeNvfp4(*QuantizeNvfp4(x, rows, cols), back.data()).ok());
  } else {
    DequantizeInt8(*QuantizeInt8(x, rows, cols), back.data());
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    num += (back[i] - x[i]) * static_cast<double>(back[i] - x[i]);
    den += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

TEST(QuantFormatsTest, LossOnGaussianDataIsWhatTheFormatsPredict) {
  // INT8: step amax/127 with amax ~3.3 of 512 N(0,1) values: rms error ~ step/sqrt(12)
  // ~ 0.0075. NVFP4: 16-value blocks on a 3-bit grid: ~0.08-0.1.
  const double int8 = FormatError(false, 64, 512, testing::TestSeed(23));
  const double nvfp4 = FormatError(true, 64, 512, testing::TestSeed(24));
  EXPECT_GT(int8, 0.004);
  EXPECT_LT(int8, 0.012);
  EXPECT_GT(nvfp4, 0.05);
  EXPECT_LT(nvfp4, 0.15);
  RecordProperty("int8_rel_error", std::to_string(int8));
  RecordProperty("nvfp4_rel_error", std::to_string(nvfp4));
}

TEST(QuantFormatsTest, BytesOnTheWire) {
  EXPECT_EQ(Nvfp4Bytes(4096, 4096), 4096 * 4096 / 2 + 4096 * 256 + 4);  // 9.44 MB
  EXPECT_LE(Nvfp4Bytes(4096, 4096), 9500000);
  EXPECT_EQ(Int8Bytes(4096, 4096), 4096 * 4096 + 4096 * 4);
}

}  // namespace
}  // namespace gemmd
