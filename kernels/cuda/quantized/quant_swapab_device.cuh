// Device helpers of the swap-AB kernels (quant_swapab.cu on mma.sync,
// quant_swapab_wgmma_sm90a.cu on wgmma): one lane's share of a super-tile
// (kernels/quant_prepack.h) decoded into its A registers of one m16n8k16 step, the same
// fragment for mma.sync and for wgmma's register A. .cu files only.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_DEVICE_CUH_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_DEVICE_CUH_

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/quantized/nvfp4_decode.cuh"
#include "kernels/cuda/quantized/quant_skinny_device.cuh"
#include "kernels/quant_prepack.h"

namespace gemmd::gpu::swapab {

// A super-tile's code (INT8: value) bytes, and its NVFP4 scale bytes.
template <bool kInt8>
constexpr int kTileBytes = static_cast<int>(kInt8 ? kSwapAbInt8TileBytes : kSwapAbCodeTileBytes);
constexpr int kScaleTileBytes = static_cast<int>(kSwapAbScaleTileBytes);
constexpr int kSuperTileK = static_cast<int>(kSwapAbK);

constexpr int kBandTiles = static_cast<int>(kSwapAbBandTiles);

// SwapAbTileIndex (quant_prepack.h) for n / 16 row tiles, k_tiles K tiles.
__device__ __forceinline__ int64_t TileIndex(int row_tiles, int k_tiles, int rt, int kt) {
  const int band = rt / kBandTiles;
  const int band_tiles = min(kBandTiles, row_tiles - band * kBandTiles);
  return static_cast<int64_t>(band) * kBandTiles * k_tiles + kt * band_tiles + rt % kBandTiles;
}

// Two scale bytes (row g's, row g + 8's; higher bits ignored) -> an FP16 pair, each the
// scale * 2^7: the E4M3 bits placed as FP16 are the scale * 2^-8, then * 2^15. With the
// codes' 2^-14 the products are value * scale * 2^-7, exact in FP16 (their lowest bit >=
// 2^-17); the launch multiplies the output by 2^7.
__device__ __forceinline__ uint32_t ScalePair(uint32_t two_bytes) {
  const uint32_t v = (two_bytes & 0xFFu) | ((two_bytes & 0xFF00u) << 8);
  const uint32_t bits = ((v << 7) & 0x3F803F80u) | ((v << 8) & 0x80008000u);
  return internal::nvfp4::Hmul2(bits, 0x78007800u);
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A lane's bytes of one super-tile: NVFP4 its 16 code bytes (q0) and its row group's 8
// scale bytes; INT8 its 32 value bytes (q0, q1).
struct LaneTile {
  uint4 q0, q1;
  uint2 scales;
};

// `tile`: the super-tile's code (value) bytes; `scales`: its scale bytes (NVFP4).
template <bool kInt8>
__device__ __forceinline__ LaneTile LoadLaneTile(const uint8_t* tile, const uint8_t* scales,
                                                 int lane) {
  LaneTile l;
  if constexpr (kInt8) {
    l.q0 = reinterpret_cast<const uint4*>(tile)[2 * lane];
    l.q1 = reinterpret_cast<const uint4*>(tile)[2 * lane + 1];
    l.scales = make_uint2(0, 0);
  } else {
    l.q0 = reinterpret_cast<const uint4*>(tile)[lane];
    l.q1 = make_uint4(0, 0, 0, 0);
    l.scales = reinterpret_cast<const uint2*>(scales)[lane / 4];
  }
  return l;
}

// Step `step` (0-3, a compile-time constant after unrolling) -> the lane's A registers:
// (row g, K slots 2t, 2t+1), (row g+8, the same), (row g, 2t+8, 2t+9), (row g+8, the same).
template <bool kInt8>
__device__ __forceinline__ void DecodeStep(const LaneTile& l, int step, uint32_t (&w)[4]) {
  if constexpr (kInt8) {
    const uint4& q = step < 2 ? l.q0 : l.q1;
    skinny::DecodeInt8Word(Word(q, 2 * (step % 2)), &w[0]);
    skinny::DecodeInt8Word(Word(q, 2 * (step % 2) + 1), &w[2]);
  } else {
    skinny::DecodeE2m1Word(Word(l.q0, step), w);
    const uint32_t pair = ScalePair((step < 2 ? l.scales.x : l.scales.y) >> (16 * (step % 2)));
    w[0] = skinny::Hmul2Broadcast<0>(w[0], pair);
    w[1] = skinny::Hmul2Broadcast<1>(w[1], pair);
    w[2] = skinny::Hmul2Broadcast<0>(w[2], pair);
    w[3] = skinny::Hmul2Broadcast<1>(w[3], pair);
  }
}

}  // namespace gemmd::gpu::swapab

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SWAPAB_DEVICE_CUH_
