// The swap-AB skinny kernel on mma.sync (quant_swapab.h), NVFP4 or INT8: the path for GPUs
// without wgmma. A block owns kRowTiles tiles of 16 weight rows; its kWarps warps take the
// K super-tiles in turn (warp w: w, w + kWarps, ...), so at any moment the block reads
// consecutive super-tiles. Per super-tile a lane loads its 16 code bytes and 8 scale bytes
// (INT8: 32 value bytes) of each row tile and, per MMA step and token tile, its token's
// two B words (K 2t, 2t+1 and 2t+8, 2t+9 of the step), decodes the codes into A fragments
// and issues kRowTiles x kTokTiles x 4 MMAs. The warps' sums meet in shared memory and
// warp 0 adds them in warp order.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_facts.h"
#include "kernels/cuda/quantized/nvfp4_expand.h"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/cuda/quantized/quant_swapab_device.cuh"
#include "kernels/cuda/quantized/quant_swapab_wgmma.h"

namespace gemmd::gpu {
namespace {

using skinny::Mma;
using swapab::kScaleTileBytes;
using swapab::kSuperTileK;

// kInt8: the weight's values end at byte n * k, where its FP32 row scales follow.
template <bool kInt8, int kTokTiles, int kRowTiles, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    SwapAbKernel(const __half* __restrict__ a, int m, const uint8_t* __restrict__ packed,
                 float out_scale, int n, int k, float* __restrict__ c, int l2_ahead) {
  constexpr int kTileBytes = swapab::kTileBytes<kInt8>;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_tile0 = static_cast<int>(blockIdx.x) * kRowTiles;
  const int k_tiles = k / kSuperTileK;
  const uint8_t* const scales = packed + static_cast<int64_t>(n) * k / 2;  // NVFP4's region
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
    // Asks L2 for this warp's super-tiles' codes l2_ahead turns on (a 128-byte line a lane).
    if (l2_ahead > 0 && lane < (kTileBytes + 127) / 128 && s + l2_ahead * kWarps < k_tiles) {
#pragma unroll
      for (int rt = 0; rt < kRowTiles; ++rt) {
        const int64_t ahead =
            swapab::TileIndex(n / 16, k_tiles, row_tile0 + rt, s + l2_ahead * kWarps);
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(packed + ahead * kTileBytes + 128 * lane));
      }
    }
    // Lane (g, t)'s B words of token 8 jt + g: per step j, K 16j + 2t (+1) and 16j + 2t + 8 (+9).
    uint32_t x[kTokTiles][4][2];
#pragma unroll
    for (int jt = 0; jt < kTokTiles; ++jt) {
      const int token = 8 * jt + g;
      const __half* row = a + static_cast<int64_t>(token) * k + kSuperTileK * s + 2 * t;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[jt][j][0] = token < m ? __ldg(reinterpret_cast<const unsigned*>(row + 16 * j)) : 0u;
        x[jt][j][1] = token < m ? __ldg(reinterpret_cast<const unsigned*>(row + 16 * j + 8)) : 0u;
      }
    }
#pragma unroll
    for (int rt = 0; rt < kRowTiles; ++rt) {
      const int64_t index = swapab::TileIndex(n / 16, k_tiles, row_tile0 + rt, s);
      const swapab::LaneTile lt = swapab::LoadLaneTile<kInt8>(
          packed + index * kTileBytes, scales + index * kScaleTileBytes, lane);
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        uint32_t w[4];
        swapab::DecodeStep<kInt8>(lt, step, w);
#pragma unroll
        for (int jt = 0; jt < kTokTiles; ++jt) {
          Mma(acc[rt][jt], w[0], w[1], w[2], w[3], x[jt][step][0], x[jt][step][1]);
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

absl::Status SwapAbRuns(const void* a, int64_t m, const void* packed, int64_t n, int64_t k,
                        SwapAbPath path) {
  const int64_t max_m = path == SwapAbPath::kWgmma ? kSwapAbWgmmaMaxM : kSwapAbMaxM;
  if (m < 1 || m > max_m) {
    return absl::InvalidArgumentError(
        absl::StrCat("the swap-AB kernel takes 1 to ", max_m, " rows of A; got ", m));
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

absl::StatusOr<SwapAbPath> ResolveSwapAbPath(SwapAbPath path) {
  if (path == SwapAbPath::kMmaSync) return path;
  const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
  if (!facts.ok()) return facts.status();
#if defined(GEMMD_HAVE_SM90A)
  if (facts->major == 9) return SwapAbPath::kWgmma;
#endif
  if (path == SwapAbPath::kWgmma) {
    return absl::FailedPreconditionError(
        "the swap-AB wgmma kernel runs on compute capability 9.0 in builds with sm_90a");
  }
  return SwapAbPath::kMmaSync;
}

bool SwapAbWgmmaBuilt() {
#if defined(GEMMD_HAVE_SM90A)
  return true;
#else
  return false;
#endif
}

std::string SwapAbKernelName(bool int8, SwapAbPath resolved) {
  return absl::StrCat("swapab_", int8 ? "int8" : "nvfp4",
                      resolved == SwapAbPath::kWgmma ? "_wgmma" : "_mma16816");
}

namespace {

absl::Status LaunchSwapAb(bool int8, const void* a, int64_t m, const void* packed, float out_scale,
                          int64_t n, int64_t k, float* c, cudaStream_t stream,
                          const SwapAbOptions& options) {
  // What needs no device first (the widest row limit the path may have), then the path's.
  const SwapAbPath widest =
      options.path == SwapAbPath::kMmaSync ? SwapAbPath::kMmaSync : SwapAbPath::kWgmma;
  if (absl::Status runs = SwapAbRuns(a, m, packed, n, k, widest); !runs.ok()) return runs;
  if (c == nullptr) return absl::InvalidArgumentError("the swap-AB kernel needs C");
  const absl::StatusOr<SwapAbPath> path = ResolveSwapAbPath(options.path);
  if (!path.ok()) return path.status();
  if (absl::Status runs = SwapAbRuns(a, m, packed, n, k, *path); !runs.ok()) return runs;
#if defined(GEMMD_HAVE_SM90A)
  if (*path == SwapAbPath::kWgmma && m > kSwapAbMaxM) {
    return internal::LaunchSquareSwapAbWgmma(int8, a, m, packed, out_scale, n, k, c, options,
                                             stream);
  }
  if (*path == SwapAbPath::kWgmma) {
    return internal::LaunchSwapAbWgmma(int8, a, m, packed, out_scale, n, k, c, options, stream);
  }
#endif
  return int8 ? LaunchFor<true>(a, m, packed, out_scale, n, k, c, options.l2_ahead, stream)
              : LaunchFor<false>(a, m, packed, out_scale, n, k, c, options.l2_ahead, stream);
}

}  // namespace

absl::Status LaunchSwapAbNvfp4(const void* a, int64_t m, const void* packed, float tensor_scale,
                               int64_t n, int64_t k, float* c, cudaStream_t stream,
                               const SwapAbOptions& options) {
  // The decode leaves every product times 2^-7 (ScalePair).
  return LaunchSwapAb(false, a, m, packed, tensor_scale * 128.0f, n, k, c, stream, options);
}

absl::Status LaunchSwapAbNvfp4xNvfp4(const void* a_codes, const void* a_scales,
                                     float a_tensor_scale, int64_t m, const void* packed,
                                     float tensor_scale, int64_t n, int64_t k, float* c,
                                     void* a_half, cudaStream_t stream,
                                     const SwapAbOptions& options) {
  if (absl::Status runs = SwapAbRuns(a_codes, m, packed, n, k, SwapAbPath::kWgmma); !runs.ok()) {
    return runs;
  }
  if (!Aligned16(a_scales)) {
    return absl::InvalidArgumentError("the swap-AB kernel needs A's scales 16-byte aligned");
  }
  if (c == nullptr) return absl::InvalidArgumentError("the swap-AB kernel needs C");
  if (a_half == nullptr || !Aligned16(a_half)) {
    return absl::InvalidArgumentError(
        "the NVFP4 x NVFP4 swap-AB kernel needs a_half: Nvfp4HalfBytes(m, k) bytes of device "
        "memory, 16-byte aligned");
  }
  const absl::StatusOr<SwapAbPath> path = ResolveSwapAbPath(SwapAbPath::kWgmma);
  if (!path.ok()) return path.status();
#if defined(GEMMD_HAVE_SM90A)
  // Both decodes leave their products times 2^-7 (ScalePair, nvfp4::ScaleHalf2).
  const float out_scale = a_tensor_scale * tensor_scale * 16384.0f;
  if (absl::Status expanded = ExpandNvfp4ToHalf(a_codes, a_scales, m, k, a_half, stream);
      !expanded.ok()) {
    return expanded;
  }
  SwapAbOptions wgmma = options;
  wgmma.path = SwapAbPath::kWgmma;
  return LaunchSwapAb(false, a_half, m, packed, out_scale, n, k, c, stream, wgmma);
#else
  return absl::InternalError("unreachable: wgmma resolved in a build without sm_90a");
#endif
}

absl::Status LaunchSwapAbInt8(const void* a, int64_t m, const void* packed, int64_t n, int64_t k,
                              float* c, cudaStream_t stream, const SwapAbOptions& options) {
  return LaunchSwapAb(true, a, m, packed, 1.0f, n, k, c, stream, options);
}

}  // namespace gemmd::gpu
