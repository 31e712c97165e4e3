#include "kernels/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/half_bulk.h"

namespace gemmd {
namespace {

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);  // rounds down
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);  // tie rounds to even: inf
  EXPECT_EQ(FloatToHalfBits(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14)), 0x0400);             // smallest normal
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: even
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(std::nanf("")))));
  EXPECT_EQ(HalfBitsToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfBitsToFloat(0x8001), -std::ldexp(1.0f, -24));
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7c00u, 0x7c00u);
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(f))));
      continue;
    }
    ASSERT_EQ(FloatToHalfBits(f), h) << "half bits 0x" << std::hex << h;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (round-to-nearest-even) as an oracle.
TEST(HalfTest, MatchesCompilerFloat16OnRandomFloats) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2'000'000; ++i) {
    // Keep exponents near the half range so subnormals, ties and overflow all occur.
    uint32_t x = bits(rng);
    x = (x & 0x807fffffu) | ((96u + (x >> 23) % 48u) << 23);
    const float f = BitsToFloat(x);
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(FloatToHalfBits(f), expected) << "float bits 0x" << std::hex << x;
  }
}
#endif

TEST(Bf16Test, KnownValuesAndRounding) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(-1.0f), 0xbf80);
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x3f818000u)), 0x3f82);  // tie: even
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x3f808001u)), 0x3f81);
  EXPECT_EQ(Bf16BitsToFloat(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::nanf("")))));
}

TEST(Bf16Test, EveryBf16RoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = Bf16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16Bits(f), b) << "bf16 bits 0x" << std::hex << b;
  }
}

// The bulk (F16C where available) converters agree bit for bit with the scalar ones, on
// every half value and on random floats across the half range, specials included.
TEST(HalfBulkTest, MatchesScalarConversions) {
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t h = 0; h < 0x10000u; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> widened(halves.size());
  HalfToFloatBulk(halves.data(), static_cast<int64_t>(halves.size()), widened.data());
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float expected = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(widened[h]));
    } else {
      ASSERT_EQ(FloatBits(widened[h]), FloatBits(expected)) << std::hex << h;
    }
  }

  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> src(100003);  // not a multiple of 8: the scalar tail runs too
  for (float& f : src) {
    uint32_t x = bits(rng);
    x = (x & 0x807fffffu) | ((96u + (x >> 23) % 48u) << 23);
    f = BitsToFloat(x);
  }
  src[0] = std::numeric_limits<float>::infinity();
  src[1] = 70000.0f;
  src[2] = std::ldexp(1.0f, -25);
  src[3] = std::nanf("");
  std::vector<float> rounded(src.size());
  RoundToHalfBulk(src.data(), static_cast<int64_t>(src.size()), rounded.data());
  for (size_t i = 0; i < src.size(); ++i) {
    const float expected = RoundToHalf(src[i]);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(rounded[i]));
    } else {
      ASSERT_EQ(FloatBits(rounded[i]), FloatBits(expected))
          << "float bits 0x" << std::hex << FloatBits(src[i]);
    }
  }
  std::printf("bulk conversions use F16C: %s\n", HalfBulkUsesF16c() ? "yes" : "no");
}

}  // namespace
}  // namespace gemmd
