// Bit-exact FP16 (IEEE binary16) and BF16 conversions on the host, round-to-nearest-even,
// independent of compiler support for _Float16. Used by the CPU backend, the reference,
// the .npy reader and tests. Thread-safe (pure functions).
#ifndef GEMMD_KERNELS_HALF_H_
#define GEMMD_KERNELS_HALF_H_

#include <cstdint>
#include <cstring>

namespace gemmd {

inline uint32_t FloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

inline float BitsToFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

// Overflow goes to +-inf (as on the GPU), NaN stays NaN, subnormals are kept.
inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN (keep NaN quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 2^16
  if (abs >= 0x38800000u) {  // normal half range [2^-14, 2^16)
    const uint32_t mant = abs & 0x7fffffu;
    uint32_t h = (((abs >> 23) - 112u) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (abs <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to 0
  // Subnormal half: count units of 2^-24.
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exp;  // 14..24
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float value = static_cast<float>(mant) * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -value : value;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t FloatToBf16Bits(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float Bf16BitsToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// What the FP16 tensor path does to an FP32 operand.
inline float RoundToHalf(float f) { return HalfBitsToFloat(FloatToHalfBits(f)); }

}  // namespace gemmd

#endif  // GEMMD_KERNELS_HALF_H_
