#include "kernels/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

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

}  // namespace
}  // namespace gemmd
