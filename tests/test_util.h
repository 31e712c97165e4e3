// Helpers shared by the CPU-side tests: seeded random operands in any float dtype.
#ifndef GEMMD_TESTS_TEST_UTIL_H_
#define GEMMD_TESTS_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "kernels/gemm_problem.h"
#include "kernels/half.h"

namespace gemmd::testing {

// Built with AddressSanitizer: freed memory waits in its quarantine instead of going back
// to the system, so a test of the process's RSS cannot hold.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Seed for a test: GEMM_TEST_SEED from the environment, else `fallback`. Tests print it
// (SCOPED_TRACE) so a failure can be replayed.
inline uint64_t TestSeed(uint64_t fallback) {
  const char* env = std::getenv("GEMM_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : fallback;
}

// `count` N(0,1) values stored as `type` (raw little-endian bytes, like Tensor.data).
inline std::string RandomBytes(DataType type, int64_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::string out(static_cast<size_t>(count) * DataTypeSize(type), '\0');
  for (int64_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    switch (type) {
      case DataType::kFloat32:
        std::memcpy(out.data() + i * 4, &v, 4);
        break;
      case DataType::kFloat16: {
        const uint16_t h = FloatToHalfBits(v);
        std::memcpy(out.data() + i * 2, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t h = FloatToBf16Bits(v);
        std::memcpy(out.data() + i * 2, &h, 2);
        break;
      }
      case DataType::kInt8: {
        const int8_t q = static_cast<int8_t>(std::lround(v * 40.0f) % 128);
        std::memcpy(out.data() + i, &q, 1);
        break;
      }
      case DataType::kInt32: {
        const int32_t q = static_cast<int32_t>(std::lround(v * 1000.0f));
        std::memcpy(out.data() + i * 4, &q, 4);
        break;
      }
      case DataType::kFloat64: {
        // Bits below FP32's too, so a path that drops to FP32 shows as error.
        const double d = v + static_cast<double>(rng() >> 11) * 0x1p-53 * 0x1p-20;
        std::memcpy(out.data() + i * 8, &d, 8);
        break;
      }
    }
  }
  return out;
}

// A buffer of `count` elements of `type` filled with NaN (FLOAT types only).
inline std::string NanBytes(DataType type, int64_t count) {
  std::string out(static_cast<size_t>(count) * DataTypeSize(type), '\0');
  for (int64_t i = 0; i < count; ++i) {
    if (type == DataType::kFloat32) {
      const uint32_t nan = 0x7fc00000u;
      std::memcpy(out.data() + i * 4, &nan, 4);
    } else if (type == DataType::kFloat64) {
      const uint64_t nan = 0x7ff8000000000000u;
      std::memcpy(out.data() + i * 8, &nan, 8);
    } else {
      const uint16_t nan = type == DataType::kFloat16 ? 0x7e00u : 0x7fc0u;
      std::memcpy(out.data() + i * 2, &nan, 2);
    }
  }
  return out;
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_TEST_UTIL_H_
