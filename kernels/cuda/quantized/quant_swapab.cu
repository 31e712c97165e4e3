// The swap-AB skinny kernel (quant_swapab.h), NVFP4 or INT8. A block owns kRowTiles tiles of 16
// weight rows; its kWarps warps take the K super-tiles in turn (warp w: w, w + kWarps,
// ...), so at any moment the block reads consecutive super-tiles. Per super-tile a lane
// loads its 16 code bytes and 2 scale bytes (INT8: 32 value bytes) of each row tile and its
// tokens' 16 halves of
// activations (32 bytes, two 16-byte loads a token tile), decodes the codes into A
// fragments and issues kRowTiles x kTokTiles x 4 MMAs. The warps' sums meet in shared
// memory and warp 0 adds them in warp order.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/quantized/nvfp4_decode.cuh"
#include "kernels/cuda/quantized/quant_skinny_device.cuh"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/quant_prepack.h"

namespace gemmd::gpu {
namespace {

using skinny::DecodeE2m1Word;
using skinny::DecodeInt8Word;
using skinny::Hmul2Broadcast;
using skinny::Mma;

template <bool kInt8>
constexpr int kSuperTileBytes = static_cast<int>(kInt8 ? kSwapAbInt8SuperTileBytes
                                                       : kSwapAbSuperTileBytes);
constexpr int kSuperTileK = static_cast<int>(kSwapAbK);

// A lane's two scale bytes (row g's, row g + 8's) -> FP16 pair (scale * 2^7) each: the E4M3
// bits placed as FP16 are the scale * 2^-8, then * 2^15. With the codes' 2^-14 the products
// are value * scale * 2^-7, exact in FP16 (their lowest bit >= 2^-17).
__device__ __forceinline__ uint32_t ScalePair(uint32_t two_bytes) {
  const uint32_t v = (two_bytes & 0xFFu) | ((two_bytes & 0xFF00u) << 8);
  const uint32_t bits = ((v << 7) & 0x3F803F80u) | ((v << 8) & 0x80008000u);
  return internal::nvfp4::Hmul2(bits, 0x78007800u);
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// kInt8: the weight's values end at byte n * k, where its FP32 row scales follow.
template <bool kInt8, int kTokTiles, int kRowTiles, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    SwapAbKernel(const __half* __restrict__ a, int m, const uint8_t* __restrict__ packed,
                 float out_scale, int n, int k, float* __restrict__ c, int l2_ahead) {
  constexpr int kTileBytes = kSuperTileBytes<kInt8>;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_tile0 = static_cast<int>(blockIdx.x) * kRowTiles;
  const int k_tiles = k / kSuperTileK;
  float acc[kRowTiles][kTokTiles][4];
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int j = 0; j < kTokTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][j][e] = 0.0f;
    }
  }
  for (int s = warp; s < k_tiles; s += kWarps) {
    // Asks L2 for this warp's super-tile l2_ahead turns on (a 128-byte line a lane).
    if (l2_ahead > 0 && lane < (kTileBytes + 127) / 128 && s + l2_ahead * kWarps < k_tiles) {
#pragma unroll
      for (int rt = 0; rt < kRowTiles; ++rt) {
        const uint8_t* ahead =
            packed +
            (static_cast<int64_t>(row_tile0 + rt) * k_tiles + s + l2_ahead * kWarps) * kTileBytes;
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ahead + 128 * lane));
      }
    }
    // Lane (g, t) brings token 8 jt + g's K [64 s + 16 t, +16): the MMA's B fragments of
    // the super-tile's four steps (the layout's K order).
    uint4 x[kTokTiles][2];
#pragma unroll
    for (int jt = 0; jt < kTokTiles; ++jt) {
      const int token = 8 * jt + g;
      if (token < m) {
        const uint4* p = reinterpret_cast<const uint4*>(a + static_cast<int64_t>(token) * k +
                                                        kSuperTileK * s + 16 * t);
        x[jt][0] = __ldg(p);
        x[jt][1] = __ldg(p + 1);
      } else {
        x[jt][0] = x[jt][1] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int rt = 0; rt < kRowTiles; ++rt) {
      const uint8_t* tile =
          packed + (static_cast<int64_t>(row_tile0 + rt) * k_tiles + s) * kTileBytes;
      // Loads: INT8 32 value bytes a lane; NVFP4 16 code bytes and the 2 scale bytes.
      uint4 q0, q1;
      uint32_t scales = 0;
      if constexpr (kInt8) {
        q0 = __ldg(reinterpret_cast<const uint4*>(tile) + 2 * lane);
        q1 = __ldg(reinterpret_cast<const uint4*>(tile) + 2 * lane + 1);
      } else {
        q0 = __ldg(reinterpret_cast<const uint4*>(tile) + lane);
        scales = ScalePair(__ldg(reinterpret_cast<const unsigned short*>(tile + 512) + lane));
      }
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        // The step's A registers: (row g, K slots 2t, 2t+1), (row g+8, same), (row g,
        // 2t+8, 2t+9), (row g+8, same).
        uint32_t w[4];
        if constexpr (kInt8) {
          const uint4& q = step < 2 ? q0 : q1;
          DecodeInt8Word(Word(q, 2 * (step % 2)), &w[0]);
          DecodeInt8Word(Word(q, 2 * (step % 2) + 1), &w[2]);
        } else {
          DecodeE2m1Word(Word(q0, step), w);
          w[0] = Hmul2Broadcast<0>(w[0], scales);
          w[1] = Hmul2Broadcast<1>(w[1], scales);
          w[2] = Hmul2Broadcast<0>(w[2], scales);
          w[3] = Hmul2Broadcast<1>(w[3], scales);
        }
#pragma unroll
        for (int jt = 0; jt < kTokTiles; ++jt) {
          const uint4& half = x[jt][step / 2];
          Mma(acc[rt][jt], w[0], w[1], w[2], w[3], Word(half, 2 * (step % 2)),
              Word(half, 2 * (step % 2) + 1));
        }
      }
    }
  }

  // Warps 1.. leave their sums in shared memory; warp 0 adds them in warp order.
  constexpr int kValues = kRowTiles * kTokTiles * 4;
  __shared__ float partial[kWarps > 1 ? kWarps - 1 : 1][kValues][32];
  if (warp > 0) {
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int j = 0; j < kTokTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          partial[warp - 1][(r * kTokTiles + j) * 4 + e][lane] = acc[r][j][e];
      }
    }
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
    for (int j = 0; j < kTokTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = acc[r][j][e];
        for (int w = 0; w < kWarps - 1; ++w) v += partial[w][(r * kTokTiles + j) * 4 + e][lane];
        // C fragment: e 0, 1: weight row g, tokens 2t, 2t + 1; e 2, 3: row g + 8.
        const int row = (row_tile0 + r) * 16 + g + 8 * (e / 2);
        const int token = 8 * j + 2 * t + (e % 2);
        float scale = out_scale;
        if constexpr (kInt8) {
          scale *=
              __ldg(reinterpret_cast<const float*>(packed + static_cast<int64_t>(n) * k) + row);
        }
        if (token < m) c[static_cast<int64_t>(token) * n + row] = v * scale;
      }
    }
  }
}

template <bool kInt8, int kTokTiles, int kRowTiles, int kWarps>
absl::Status Launch(const void* a, int m, const void* packed, float out_scale, int n, int k,
                    float* c, int l2_ahead, cudaStream_t stream) {
  const int blocks = n / (16 * kRowTiles);
  SwapAbKernel<kInt8, kTokTiles, kRowTiles, kWarps><<<blocks, kWarps * 32, 0, stream>>>(
      static_cast<const __half*>(a), m, static_cast<const uint8_t*>(packed), out_scale, n, k, c,
      l2_ahead);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The configuration for m rows: token tiles, row tiles a warp, warps a block.
template <bool kInt8>
absl::Status LaunchFor(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                       int64_t k, float* c, int l2_ahead, cudaStream_t stream) {
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (m <= 8) return Launch<kInt8, 1, 1, 8>(a, mi, packed, out_scale, ni, ki, c, l2_ahead, stream);
  if (m <= 16) return Launch<kInt8, 2, 1, 8>(a, mi, packed, out_scale, ni, ki, c, l2_ahead, stream);
  // Past 16 rows a warp takes two row tiles where n allows, so each 16-byte load of
  // activations feeds twice the MMAs.
  const bool pairs = n % 32 == 0;
  if (m <= 32) {
    return pairs ? Launch<kInt8, 4, 2, 4>(a, mi, packed, out_scale, ni, ki, c, l2_ahead, stream)
                 : Launch<kInt8, 4, 1, 4>(a, mi, packed, out_scale, ni, ki, c, l2_ahead, stream);
  }
  return pairs ? Launch<kInt8, 8, 2, 4>(a, mi, packed, out_scale, ni, ki, c, l2_ahead, stream)
               : Launch<kInt8, 8, 1, 4>(a, mi, packed, out_scale, ni, ki, c, l2_ahead, stream);
}

}  // namespace

absl::Status SwapAbRuns(const void* a, int64_t m, const void* packed, int64_t n, int64_t k) {
  if (m < 1 || m > kSwapAbMaxM) {
    return absl::InvalidArgumentError(
        absl::StrCat("the swap-AB kernel takes 1 to ", kSwapAbMaxM, " rows of A; got ", m));
  }
  if (!Nvfp4SwapAbFits(n, k) || n >= (int64_t{1} << 30) || k >= (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the swap-AB kernel needs a weight of rows % 16 == 0 and K % 64 == 0, below 2^30; got [", n,
        ", ", k, "]"));
  }
  if (!Aligned16(a) || !Aligned16(packed)) {
    return absl::InvalidArgumentError("the swap-AB kernel needs A and the weight 16-byte aligned");
  }
  return absl::OkStatus();
}

absl::Status LaunchSwapAbNvfp4(const void* a, int64_t m, const void* packed, float tensor_scale,
                               int64_t n, int64_t k, float* c, cudaStream_t stream, int l2_ahead) {
  if (absl::Status runs = SwapAbRuns(a, m, packed, n, k); !runs.ok()) return runs;
  if (c == nullptr) return absl::InvalidArgumentError("the swap-AB kernel needs C");
  // The decode leaves every product times 2^-7 (ScalePair).
  return LaunchFor<false>(a, m, packed, tensor_scale * 128.0f, n, k, c, l2_ahead, stream);
}

absl::Status LaunchSwapAbInt8(const void* a, int64_t m, const void* packed, int64_t n, int64_t k,
                              float* c, cudaStream_t stream, int l2_ahead) {
  if (absl::Status runs = SwapAbRuns(a, m, packed, n, k); !runs.ok()) return runs;
  if (c == nullptr) return absl::InvalidArgumentError("the swap-AB kernel needs C");
  return LaunchFor<true>(a, m, packed, 1.0f, n, k, c, l2_ahead, stream);
}

}  // namespace gemmd::gpu
