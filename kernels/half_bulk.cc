#include "kernels/half_bulk.h"

#include <cstring>

#include "kernels/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define GEMMD_HAVE_X86 1
#endif

namespace gemmd {
namespace {

// Elements may sit at any byte offset (payloads inside received messages): scalar reads
// go through memcpy, which compiles to a plain load.
template <typename T>
T Unaligned(const T* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

#if GEMMD_HAVE_X86
// Eight floats at a time through the F16C converters; the tail goes scalar.
__attribute__((target("avx,f16c"))) void RoundToHalfF16c(const float* src, int64_t count,
                                                         float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) dst[i] = RoundToHalf(Unaligned(src + i));
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const uint16_t* src, int64_t count,
                                                         float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) dst[i] = HalfBitsToFloat(Unaligned(src + i));
}

bool CpuHasF16c() {
  // F16C through CPUID: clang's __builtin_cpu_supports does not know "f16c" (GCC's does).
  static const bool has = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return has;
}
#else
bool CpuHasF16c() { return false; }
#endif

}  // namespace

bool HalfBulkUsesF16c() { return CpuHasF16c(); }

void RoundToHalfBulk(const float* src, int64_t count, float* dst) {
#if GEMMD_HAVE_X86
  if (CpuHasF16c()) return RoundToHalfF16c(src, count, dst);
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = RoundToHalf(Unaligned(src + i));
}

void HalfToFloatBulk(const uint16_t* src, int64_t count, float* dst) {
#if GEMMD_HAVE_X86
  if (CpuHasF16c()) return HalfToFloatF16c(src, count, dst);
#endif
  for (int64_t i = 0; i < count; ++i) dst[i] = HalfBitsToFloat(Unaligned(src + i));
}

}  // namespace gemmd
