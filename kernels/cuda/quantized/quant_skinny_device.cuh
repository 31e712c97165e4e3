// Device helpers shared by the skinny weight-only kernels (quant_skinny.cu, the register
// and ring paths; quant_skinny_stream.cu, the streaming path for M 9-64): the exact
// NVFP4 / E4M3 and INT8 decodes into FP16 fragments, and the m16n8k16 MMA. .cu files
// only.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SKINNY_DEVICE_CUH_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SKINNY_DEVICE_CUH_

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"

namespace gemmd::gpu::skinny {

// cp.async (common/cp_async.cuh) under the names the skinny kernels use.
using internal::CpAsync16;
using internal::CpAsync4;
using internal::CpAsyncCommit;
using internal::CpAsyncWait;

// Two E4M3 bytes (low 16 bits) -> FP16 pair, exactly.
__device__ __forceinline__ uint32_t E4m3x2ToHalf2(uint32_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t out;
  const unsigned short in = static_cast<unsigned short>(two);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(in));
  return out;
#else
  uint32_t out = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t b = (two >> (8 * i)) & 0xFF, e = (b >> 3) & 15, mant = b & 7;
    uint32_t h;
    if (e != 0) {
      h = ((e + 8) << 10) | (mant << 7);
    } else {  // subnormal: mant * 2^-9, normal in FP16
      h = __half_as_ushort(__hmul(__uint2half_rn(mant), __float2half_rn(0x1p-9f)));
    }
    out |= (h | ((b & 0x80) << 8)) << (16 * i);
  }
  return out;
#endif
}

// x * (y's half kHalf in both halves): written as a broadcast so that ptxas can fold it
// into HMUL2's operand selector (.H0_H0 / .H1_H1) instead of a PRMT per scale.
template <int kHalf>
__device__ __forceinline__ uint32_t Hmul2Broadcast(uint32_t x, uint32_t y) {
  const __half2 h = *reinterpret_cast<const __half2*>(&y);
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&x),
                            kHalf == 0 ? __low2half2(h) : __high2half2(h));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// (a & kMask) | (b & ~kMask): one LOP3.
template <uint32_t kMask>
__device__ __forceinline__ uint32_t Lop3Select(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;\n" : "=r"(r) : "r"(a), "r"(b), "n"(kMask));
  return r;
}

// One word of 8 E2M1 codes (k0 in the low nibble) -> four FP16 pairs (k0,k4) (k1,k5)
// (k2,k6) (k3,k7), each value e2m1 * 2^-14, exactly: a code's magnitude lands on FP16
// bits 9-11 and its sign on bit 15, so in each byte the sign must sit 6 bits above the
// magnitude's lowest bit before the last shift. `even` keeps the even codes' magnitudes
// (bits 0-2 of each byte) and takes their signs from x << 3 (bit 6); `odd` keeps the odd
// codes' signs (bit 7) and takes their magnitudes from x >> 3 (bits 1-3). Then one shift
// (none for (k3,k7), already in place) and one mask per pair: 11 instructions per 8
// codes (the first version, with both signs moved by shifts of x, took 13).
__device__ __forceinline__ void DecodeE2m1Word(uint32_t x, uint32_t* p) {
  const uint32_t even = Lop3Select<0x07070707u>(x, x << 3);
  const uint32_t odd = Lop3Select<0x80808080u>(x, x >> 3);
  constexpr uint32_t kMask = 0x8E008E00u;
  p[0] = (even << 9) & kMask;
  p[1] = (odd << 8) & kMask;
  p[2] = (even << 1) & kMask;
  p[3] = odd & kMask;
}

// Word `word` (0-3) of a lane's 32-value segment -> its four FP16 pairs (DecodeE2m1Word)
// times the segment's E4M3 block scale, `scales` holding both as an FP16 pair (words 0-1:
// the low half, 2-3: the high one): e2m1 * e4m3 * 2^-14, exact in FP16.
__device__ __forceinline__ void DecodeScaledE2m1Word(uint32_t x, uint32_t scales, int word,
                                                     uint32_t* p) {
  DecodeE2m1Word(x, p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    p[i] = word < 2 ? Hmul2Broadcast<0>(p[i], scales) : Hmul2Broadcast<1>(p[i], scales);
  }
}

// One word of 4 INT8 values k0..k3 -> FP16 pairs (k0,k1) (k2,k3), exactly: x ^ 0x80 is
// the value + 128 as a byte, placed under FP16's exponent for 1024 (0x64xx is 1024 + x),
// and 1152 = 1024 + 128 is subtracted.
__device__ __forceinline__ void DecodeInt8Word(uint32_t w, uint32_t* p) {
  const uint32_t x = w ^ 0x80808080u;
  const uint32_t lo = __byte_perm(x, 0x64646464u, 0x4140);
  const uint32_t hi = __byte_perm(x, 0x64646464u, 0x4342);
  const __half2 bias = __half2half2(__ushort_as_half(0x6480));
  const __half2 l = __hsub2(*reinterpret_cast<const __half2*>(&lo), bias);
  const __half2 u = __hsub2(*reinterpret_cast<const __half2*>(&hi), bias);
  p[0] = *reinterpret_cast<const uint32_t*>(&l);
  p[1] = *reinterpret_cast<const uint32_t*>(&u);
}

__device__ __forceinline__ void Mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace gemmd::gpu::skinny

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SKINNY_DEVICE_CUH_
