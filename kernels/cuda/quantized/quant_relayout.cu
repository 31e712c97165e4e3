// The swap-AB layout's moves in device memory (quant_relayout.h). One block a super-tile,
// one thread per 4-byte word of NVFP4 codes (its four canonical bytes: rows g and g + 8 at
// K c and c + 8, low nibbles to nibbles 0-3, high to 4-7, quant_prepack.h), per 8 INT8
// value bytes (two canonical byte pairs a word) and per scale byte: gathers and scatters
// of whole bytes, no two threads on one byte.
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/quantized/quant_relayout.h"
#include "kernels/quant_prepack.h"

namespace gemmd::gpu {
namespace {

constexpr int kThreads = 128;  // 32 lanes x 4 steps of a super-tile
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// Super-tile `tile` of a weight of row_tiles x k_tiles super-tiles (quant_prepack.h's
// numbering, bands of kSwapAbBandTiles row tiles) -> its row tile and K tile.
__device__ __forceinline__ void TileOf(int64_t tile, int64_t row_tiles, int64_t k_tiles,
                                       int64_t* rt, int64_t* kt) {
  const int64_t band_span = kSwapAbBandTiles * k_tiles;
  const int64_t band = tile / band_span, in_band = tile % band_span;
  const int64_t band_tiles = min(kSwapAbBandTiles, row_tiles - band * kSwapAbBandTiles);
  *kt = in_band / band_tiles;
  *rt = band * kSwapAbBandTiles + in_band % band_tiles;
}

// This thread's place in super-tile `tile`: lane L = threadIdx / 4 (g = L / 4, t = L % 4)
// and step threadIdx % 4 of the layout cover canonical rows `row` and row + 8, from K
// column `col` (quant_prepack.h); r0 is the super-tile's first row, kt its K tile.
struct Place {
  int64_t r0, kt, row, col;
};
__device__ __forceinline__ Place PlaceOf(int64_t tile, int64_t row_tiles, int64_t k_tiles) {
  const int lane = static_cast<int>(threadIdx.x) / 4, step = static_cast<int>(threadIdx.x) % 4;
  int64_t rt, kt;
  TileOf(tile, row_tiles, k_tiles, &rt, &kt);
  return {16 * rt, kt, 16 * rt + lane / 4, 64 * kt + 16 * step + 2 * (lane % 4)};
}

// NVFP4 codes (and scales, when both scale pointers are set) canonical -> swap-AB
// (kToSwapAb) or back. `canonical*` and `packed*` are the weight's two layouts.
template <bool kToSwapAb>
__global__ void __launch_bounds__(kThreads)
    Nvfp4Kernel(uint8_t* canonical, uint8_t* canonical_scales, uint8_t* packed,
                uint8_t* packed_scales, int64_t row_tiles, int64_t k_tiles) {
  const int64_t tiles = row_tiles * k_tiles, row_bytes = 32 * k_tiles, scale_row = 4 * k_tiles;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Place p = PlaceOf(tile, row_tiles, k_tiles);
    // Canonical bytes (row, c / 2) hold K c (low nibble) and c + 1 (high).
    uint8_t* const bytes[4] = {canonical + p.row * row_bytes + p.col / 2,
                               canonical + (p.row + 8) * row_bytes + p.col / 2,
                               canonical + p.row * row_bytes + (p.col + 8) / 2,
                               canonical + (p.row + 8) * row_bytes + (p.col + 8) / 2};
    uint32_t* const word = reinterpret_cast<uint32_t*>(packed + 512 * tile) + threadIdx.x;
    if constexpr (kToSwapAb) {
      uint32_t w = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t b = *bytes[i];
        w |= (b & 0xFu) << (4 * i) | (b >> 4) << (4 * i + 16);
      }
      *word = w;
    } else {
      const uint32_t w = *word;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        *bytes[i] =
            static_cast<uint8_t>(((w >> (4 * i)) & 0xFu) | ((w >> (4 * i + 16)) & 0xFu) << 4);
      }
    }
    if (packed_scales != nullptr && threadIdx.x < 64) {
      // Packed byte 8g' + 2j + h: row r0 + g' + 8h's scale of K block 4 kt + j.
      const int s = static_cast<int>(threadIdx.x), sg = s / 8, j = (s % 8) / 2, h = s % 2;
      uint8_t* const from = canonical_scales + (p.r0 + sg + 8 * h) * scale_row + 4 * p.kt + j;
      uint8_t* const to = packed_scales + 64 * tile + s;
      if constexpr (kToSwapAb) {
        *to = *from;
      } else {
        *from = *to;
      }
    }
  }
}

// INT8 values: lane L's step j is 8 bytes at 32 L + 8 j, word 0 rows (g, g, g + 8, g + 8)
// at K (c, c + 1, c, c + 1), word 1 the same at c + 8: four canonical byte pairs.
template <bool kToSwapAb>
__global__ void __launch_bounds__(kThreads)
    Int8Kernel(uint8_t* canonical, uint8_t* packed, int64_t row_tiles, int64_t k_tiles) {
  const int64_t tiles = row_tiles * k_tiles, k = 64 * k_tiles;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Place p = PlaceOf(tile, row_tiles, k_tiles);
    uint16_t* const pairs[4] = {
        reinterpret_cast<uint16_t*>(canonical + p.row * k + p.col),
        reinterpret_cast<uint16_t*>(canonical + (p.row + 8) * k + p.col),
        reinterpret_cast<uint16_t*>(canonical + p.row * k + p.col + 8),
        reinterpret_cast<uint16_t*>(canonical + (p.row + 8) * k + p.col + 8)};
    // Lane L's step j: 8 bytes at 32 L + 8 j, i.e. 8 * threadIdx.
    uint16_t* const to = reinterpret_cast<uint16_t*>(packed + 1024 * tile + 8 * threadIdx.x);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kToSwapAb) {
        to[i] = *pairs[i];
      } else {
        *pairs[i] = to[i];
      }
    }
  }
}

template <bool kToSwapAb>
absl::Status Move(QuantFormat format, int64_t n, int64_t k, uint8_t* canonical,
                  uint8_t* canonical_scales, uint8_t* packed, uint8_t* packed_scales,
                  cudaStream_t stream) {
  const int64_t row_tiles = n / kSwapAbRows, k_tiles = k / kSwapAbK;
  const unsigned blocks = static_cast<unsigned>(std::min(row_tiles * k_tiles, kMaxBlocks));
  if (format == QuantFormat::kInt8) {
    Int8Kernel<kToSwapAb><<<blocks, kThreads, 0, stream>>>(canonical, packed, row_tiles, k_tiles);
  } else {
    Nvfp4Kernel<kToSwapAb><<<blocks, kThreads, 0, stream>>>(canonical, canonical_scales, packed,
                                                            packed_scales, row_tiles, k_tiles);
  }
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CheckShape(int64_t n, int64_t k) {
  if (Nvfp4SwapAbFits(n, k)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the swap-AB layout needs rows % 16 == 0 and K % 64 == 0; got [", n, ", ", k, "]"));
}

}  // namespace

size_t SwapAbRelayoutScratchBytes(QuantFormat format, int64_t n, int64_t k) {
  const SwapAbBand band = SwapAbBandOf(format, n, k, 0);
  return static_cast<size_t>(band.data_bytes + band.scales_bytes);
}

absl::Status RelayoutSwapAbInPlace(QuantFormat format, int64_t n, int64_t k, void* data,
                                   void* scales, void* scratch, size_t scratch_bytes,
                                   cudaStream_t stream) {
  if (absl::Status fits = CheckShape(n, k); !fits.ok()) return fits;
  if (scratch_bytes < SwapAbRelayoutScratchBytes(format, n, k)) {
    return absl::InvalidArgumentError(absl::StrCat("the relayout of [", n, ", ", k, "] needs ",
                                                   SwapAbRelayoutScratchBytes(format, n, k),
                                                   " bytes of scratch; got ", scratch_bytes));
  }
  auto* const copy = static_cast<uint8_t*>(scratch);
  // A band is itself a weight in the layout, in its own canonical range: copied aside,
  // then written back re-laid out over itself.
  for (int64_t band = 0; band < SwapAbBands(n); ++band) {
    const SwapAbBand b = SwapAbBandOf(format, n, k, band);
    uint8_t* const band_data = static_cast<uint8_t*>(data) + b.data_begin;
    uint8_t* const band_scales =
        b.scales_bytes > 0 ? static_cast<uint8_t*>(scales) + b.scales_begin : nullptr;
    RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(copy, band_data, static_cast<size_t>(b.data_bytes),
                                         cudaMemcpyDeviceToDevice, stream));
    if (band_scales != nullptr) {
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(copy + b.data_bytes, band_scales,
                                           static_cast<size_t>(b.scales_bytes),
                                           cudaMemcpyDeviceToDevice, stream));
    }
    if (absl::Status s = Move<true>(format, b.rows, k, copy,
                                    band_scales != nullptr ? copy + b.data_bytes : nullptr,
                                    band_data, band_scales, stream);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status PrepackSwapAb(QuantFormat format, int64_t n, int64_t k, const void* data,
                           const void* scales, void* out_data, void* out_scales,
                           cudaStream_t stream) {
  if (absl::Status fits = CheckShape(n, k); !fits.ok()) return fits;
  const bool nvfp4 = format == QuantFormat::kNvfp4;
  // Move<true> only reads the canonical side.
  return Move<true>(format, n, k, const_cast<uint8_t*>(static_cast<const uint8_t*>(data)),
                    nvfp4 ? const_cast<uint8_t*>(static_cast<const uint8_t*>(scales)) : nullptr,
                    static_cast<uint8_t*>(out_data),
                    nvfp4 ? static_cast<uint8_t*>(out_scales) : nullptr, stream);
}

absl::Status UnpackSwapAb(QuantFormat format, int64_t n, int64_t k, const void* data,
                          const void* scales, void* out_data, void* out_scales,
                          cudaStream_t stream) {
  if (absl::Status fits = CheckShape(n, k); !fits.ok()) return fits;
  const bool nvfp4 = format == QuantFormat::kNvfp4;
  // Move<false> only reads the packed side.
  return Move<false>(format, n, k, static_cast<uint8_t*>(out_data),
                     nvfp4 ? static_cast<uint8_t*>(out_scales) : nullptr,
                     const_cast<uint8_t*>(static_cast<const uint8_t*>(data)),
                     nvfp4 ? const_cast<uint8_t*>(static_cast<const uint8_t*>(scales)) : nullptr,
                     stream);
}

}  // namespace gemmd::gpu
