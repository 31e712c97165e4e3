// NVFP4 in shared memory, shared by the square NVFP4 kernels (quant_square_nvfp4*.cu):
// copying one 64-wide K step of packed rows with cp.async, and decoding it to FP16
// (.cu files only; sm_80+).
//
// Decode, exact and table-free: a code's bits placed as FP16 (s << 15 | e << 10 | m << 9)
// are its value * 2^-14, subnormal 0.5 included; one HMUL2 by the block scale * 2^7
// (an E4M3 byte shifted into FP16 position is the scale * 2^-8, subnormals and sign
// included, so * 2^15) gives value * scale * 2^-7, exact in FP16 (at most 6 significant
// bits, lowest bit >= 2^-17). Callers put the 2^7 per operand back in the epilogue.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_NVFP4_DECODE_CUH_
#define GEMMD_KERNELS_CUDA_QUANTIZED_NVFP4_DECODE_CUH_

#include <cstdint>

#include "kernels/cuda/common/mma_sm80.cuh"

namespace gemmd::gpu::internal::nvfp4 {

constexpr int kStepK = 64;              // values per row and K step
constexpr int kCodeBytes = kStepK / 2;  // packed bytes per row and step
constexpr int kScaleSlot = 8;           // bytes per row and step for its 4 scale bytes

// Copies rows [r0, r0+kRows) x K [k0, k0+64) of codes (2 x 16 bytes per row; K % 32 == 0,
// so a chunk is whole or past the end and zero-filled) and each row's 4 scale bytes.
// Those start at an even offset but not always at a multiple of 4, and cp.async copies
// 4 aligned bytes at least: each row takes the two aligned words around them
// (ScaleShift says where its bytes start). Bytes past the row's end are the next row's
// scales, paired with zero-filled codes (decoding never makes Inf or NaN, so they add
// 0). cp.async reads all 4 bytes even when told to copy fewer (compute-sanitizer flags
// it), so the buffer's last word, when half of it lies past the end, is read with a
// plain 2-byte load.
template <int kRows, int kThreads>
__device__ __forceinline__ void LoadStep(unsigned char* codes_s, unsigned char* scales_s,
                                         const uint8_t* codes, const uint8_t* scales, int r0,
                                         int rows, int K, int k0, int tid) {
  static_assert(kRows * 2 % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < kRows * 2 / kThreads; ++i) {
    const int c = tid + i * kThreads, r = c / 2, q = c % 2;
    const bool ok = r0 + r < rows && k0 + q * 32 < K;
    const uint8_t* src = codes + (int64_t(r0 + r) * K + k0) / 2 + q * 16;
    CpAsync16(codes_s + r * kCodeBytes + q * 16, ok ? src : codes, ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < kRows * 2 / kThreads; ++i) {
    const int c = tid + i * kThreads, r = c / 2, w = c % 2;
    const int64_t word = ((int64_t(r0 + r) * (K / 16) + k0 / 16) & ~int64_t{3}) + 4 * w;
    const int64_t left = int64_t(rows) * (K / 16) - word;  // to the end of the buffer
    const int bytes = r0 + r < rows ? static_cast<int>(left < 0 ? 0 : left > 4 ? 4 : left) : 0;
    unsigned char* dst = scales_s + r * kScaleSlot + 4 * w;
    if (bytes == 2) {  // 0, 2 or 4: K / 16 is even
      *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const unsigned short*>(scales + word);
    } else {
      CpAsync4(dst, bytes > 0 ? scales + word : scales, bytes);
    }
  }
}

// Byte offset of a row's first scale byte of the step inside its 8-byte slot: k0 / 16 is
// a multiple of 4, so it is the row start's offset mod 4 (0 or 2, as K / 16 is even).
__device__ __forceinline__ int ScaleShift(int row, int K) {
  return static_cast<int>((static_cast<unsigned>(row) * static_cast<unsigned>(K / 16)) & 3u);
}

__device__ __forceinline__ uint32_t Hmul2(uint32_t a, uint32_t b) {
  uint32_t d;  // no .ftz: FP16 subnormals (code 1 before scaling) must survive
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// E4M3 byte -> half2 (scale * 2^7, scale * 2^7).
__device__ __forceinline__ uint32_t ScaleHalf2(uint32_t byte) {
  const uint32_t v = byte * 0x00010001u;
  const uint32_t bits = ((v << 7) & 0x3F803F80u) | ((v << 8) & 0x80008000u);  // scale * 2^-8
  return Hmul2(bits, 0x78007800u);                                           // * 2^15
}

// 8 codes of one word -> 4 half2 (value * scale * 2^-7), in K order (2j, 2j+1), or paired
// (j, j+4) when kPermute: the same shift then serves both halves (4 instructions per pair
// instead of 5); operands permuted alike along K give the same products.
template <bool kPermute>
__device__ __forceinline__ uint4 DecodeWord(uint32_t w, uint32_t scale2) {
  uint32_t h[4];
  if (kPermute) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t mag = j < 3 ? w << (9 - 4 * j) : w >> 3;
      h[j] = (mag & 0x0E000E00u) | ((w << (12 - 4 * j)) & 0x80008000u);
    }
  } else {
    const uint32_t hi = w >> 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // Byte j at bits 8-15 (its even code in bits 8-11) and byte j of w >> 4 (the odd
      // code in bits 24-27): both codes now sit 8 bits into their half.
      const uint32_t x = __byte_perm(w, hi, ((4 + j) << 12) | (j << 4));
      h[j] = ((x << 1) & 0x0E000E00u) | ((x << 4) & 0x80008000u);
    }
  }
  return make_uint4(Hmul2(h[0], scale2), Hmul2(h[1], scale2), Hmul2(h[2], scale2),
                    Hmul2(h[3], scale2));
}

// Decodes 32 values (half `half` of row r's step) from a LoadStep stage: out[i] holds
// values 8i..8i+7 of them (16 bytes of FP16, in the order DecodeWord gives).
template <bool kPermute>
__device__ __forceinline__ void DecodeHalfRow(const unsigned char* codes_s,
                                              const unsigned char* scales_s, int r, int half,
                                              int shift, uint4 (&out)[4]) {
  const uint4 p = *reinterpret_cast<const uint4*>(codes_s + r * kCodeBytes + half * 16);
  const uint32_t sc =
      *reinterpret_cast<const unsigned short*>(scales_s + r * kScaleSlot + shift + half * 2);
  const uint32_t s0 = ScaleHalf2(sc & 0xFF), s1 = ScaleHalf2(sc >> 8);
  out[0] = DecodeWord<kPermute>(p.x, s0);
  out[1] = DecodeWord<kPermute>(p.y, s0);
  out[2] = DecodeWord<kPermute>(p.z, s1);
  out[3] = DecodeWord<kPermute>(p.w, s1);
}

}  // namespace gemmd::gpu::internal::nvfp4

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_NVFP4_DECODE_CUH_
