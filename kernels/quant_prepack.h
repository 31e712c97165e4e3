// Quantized weights re-laid out for the swap-AB skinny kernels (cuda/quantized/quant_swapab.h):
// NVFP4: the canonical format (quant_formats.h: [n, k/2] code bytes, [n, k/16] E4M3 scale bytes)
// rearranged so that one warp reads a 16-row x 64-K piece of the weight (a "super-tile") as
// 512 contiguous code bytes and 64 contiguous scale bytes, each lane 16 code bytes and 8
// scale bytes, and the 16 code bytes decode straight into its A fragments of four m16n8k16
// steps (the weight is the MMA's A operand, 16 weight rows a warp; mma.sync and wgmma's
// register A share that fragment). K keeps its order, so the activations are the MMA's B
// operand as stored (a TMA box of them feeds wgmma). The codes and the scales stay in
// their canonical regions, and each band of 256 rows in its canonical range. Same bytes,
// none added; exact both ways.
// Plain C++, thread-safe.
//
// Super-tiles are numbered in bands of 16 row tiles (256 rows; the last band may have
// fewer), K tile by K tile inside a band: with T = k / 64, super-tile (row tile rt, K
// tile kt) is number SwapAbTileIndex(n, k, rt, kt) = 16 T band + kt * band_tiles +
// rt % 16 (band = rt / 16), so the row tiles of a band at one K tile are consecutive (one
// copy feeds a block) and a band's bytes stay in the band's canonical range (the repack
// runs in place, one band at a time). Super-tile i (r0 = 16 rt, k0 = 64 kt) has code bytes
// [512 i, + 512) and scale bytes [n * k / 2 + 64 i, + 64):
// - code byte 16L .. 16L + 15 belong to lane L = 4g + t (g = L / 4, t = L % 4): four
//   words, word j the MMA step j (K k0 + 16j .. + 15). Its nibbles 0..7 (nibble i: byte
//   i / 2, low nibble first) are the codes of rows (r0+g, r0+g+8, r0+g, r0+g+8, r0+g,
//   r0+g+8, r0+g, r0+g+8) at K (c, c, c+8, c+8, c+1, c+1, c+9, c+9), c = k0 + 16j + 2t.
//   The word decodes (DecodeE2m1Word's pairs (0,4) (1,5) (2,6) (3,7)) into the lane's
//   four A registers of step j: (row g, K slots 2t, 2t+1), (row g+8, the same), (row g,
//   2t+8, 2t+9), (row g+8, the same).
// - scale byte 8g + 2j + h is row r0+g+8h's E4M3 scale of the K block k0/16 + j: the 8
//   bytes at 8g are the scales of all four steps of lanes 4g..4g+3.
// Needs n % 16 == 0 and k % 64 == 0 (Nvfp4SwapAbFits); other shapes stay canonical.
//
// INT8 (values [n, k], FP32 row scales [n]) the same way, in 1024-byte super-tiles of
// 16 rows x 64 K, super-tile i at 1024 i, then the n row scales as they were
// (the epilogue's, 4n bytes, at byte n * k): lane L has bytes [32L, 32L + 32), 8 a step j,
// two words. Word 0 holds rows (r0+g, r0+g, r0+g+8, r0+g+8) at K (c, c+1, c, c+1), word
// 1 the same at (c+8, c+9): DecodeInt8Word's pairs (0,1) (2,3) are then the A registers
// of step j in MMA order.
#ifndef GEMMD_KERNELS_QUANT_PREPACK_H_
#define GEMMD_KERNELS_QUANT_PREPACK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/quant_formats.h"

namespace gemmd {

inline constexpr int64_t kSwapAbRows = 16;             // weight rows of a super-tile
inline constexpr int64_t kSwapAbK = 64;                // K of a super-tile
inline constexpr int64_t kSwapAbCodeTileBytes = 512;   // a super-tile's NVFP4 code bytes
inline constexpr int64_t kSwapAbScaleTileBytes = 64;   // and its scale bytes

// Whether a [n, k] NVFP4 weight has a swap-AB layout: n % 16 == 0, k % 64 == 0, both > 0.
bool Nvfp4SwapAbFits(int64_t n, int64_t k);

// codes [n, k/2] + scales [n, k/16] (canonical) -> out, n*k/2 + n*k/16 bytes (swap-AB).
// INVALID_ARGUMENT when !Nvfp4SwapAbFits(n, k); nothing else is checked (any bytes move).
absl::Status PrepackNvfp4SwapAb(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                                uint8_t* out);

// The same into the two regions apart: out_codes n*k/2 bytes, out_scales n*k/16 bytes.
absl::Status PrepackNvfp4SwapAbRegions(const uint8_t* codes, const uint8_t* scales, int64_t n,
                                       int64_t k, uint8_t* out_codes, uint8_t* out_scales);

// The inverse: packed (swap-AB, n*k/2 + n*k/16 bytes) -> codes [n, k/2] + scales [n, k/16].
absl::Status UnpackNvfp4SwapAb(const uint8_t* packed, int64_t n, int64_t k, uint8_t* codes,
                               uint8_t* scales);

// The same from the two regions apart (n*k/2 code bytes, n*k/16 scale bytes), either
// output null to skip it. A band of r rows (rows [256b, 256b + r)) is itself an [r, k]
// weight in the layout: its codes from byte 128 k b of the code region, its scales from
// byte 16 k b of the scale region (INT8: values from byte 256 k b), so a reader can
// unpack any band alone.
absl::Status UnpackNvfp4SwapAbRegions(const uint8_t* packed_codes, const uint8_t* packed_scales,
                                      int64_t n, int64_t k, uint8_t* codes, uint8_t* scales);

inline constexpr int64_t kSwapAbInt8TileBytes = 1024;
inline constexpr int64_t kSwapAbBandTiles = 16;  // row tiles a band
inline constexpr int64_t kSwapAbBandRows = kSwapAbBandTiles * kSwapAbRows;

// The number of super-tile (row tile rt, K tile kt) of an [n, k] weight (see above).
int64_t SwapAbTileIndex(int64_t n, int64_t k, int64_t rt, int64_t kt);

// values [n, k] + row scales (4n bytes, FP32 as stored) -> out, n*k + 4n bytes (swap-AB).
// INVALID_ARGUMENT when !Nvfp4SwapAbFits(n, k) (the same shapes).
absl::Status PrepackInt8SwapAb(const int8_t* values, const uint8_t* scales, int64_t n, int64_t k,
                               uint8_t* out);
// The values alone: values [n, k] -> out, n*k bytes of the value region.
absl::Status PrepackInt8SwapAbValues(const int8_t* values, int64_t n, int64_t k, uint8_t* out);
absl::Status UnpackInt8SwapAb(const uint8_t* packed, int64_t n, int64_t k, int8_t* values,
                              uint8_t* scales);
// The values alone (n*k bytes of the value region) -> values [n, k].
absl::Status UnpackInt8SwapAbValues(const uint8_t* packed_values, int64_t n, int64_t k,
                                    int8_t* values);

// A canonical weight of `format` (data; scales: NVFP4's [n, k/16] block scales, INT8's n
// FP32 row scales) -> `out` (data bytes, then scale bytes) in the swap-AB layout with bands
// of `band_rows` rows: each slab of that many rows (the last may be shorter) prepacked
// alone as a weight of one band. kSwapAbBandRows gives the layout itself; fewer rows a
// band are for kernels that read narrower bands (gemm-bench's sweeps). INVALID_ARGUMENT
// when !Nvfp4SwapAbFits(n, k) or band_rows is not a positive multiple of 16 up to
// kSwapAbBandRows.
absl::Status PrepackSwapAbInBands(QuantFormat format, const uint8_t* data, const uint8_t* scales,
                                  int64_t n, int64_t k, int64_t band_rows, uint8_t* out);

// How a stored quantized weight's bytes are laid out: as uploaded (quant_formats.h), or
// re-laid out for the swap-AB kernels (above; NVFP4 codes and scales, INT8 values; INT8
// row scales stay as they are).
enum class WeightLayout { kCanonical, kSwapAb };
const char* WeightLayoutName(WeightLayout layout);  // "canonical", "swap-ab"

// A weight [n, k] of `format` in the canonical layout, its data at `data` and its scales at
// `scales`, re-laid out in place (swap-AB), one band of 256 rows at a time through a band-
// sized scratch buffer. INVALID_ARGUMENT when !Nvfp4SwapAbFits(n, k).
absl::Status RelayoutSwapAbInPlace(QuantFormat format, int64_t n, int64_t k, uint8_t* data,
                                   uint8_t* scales);

// Where band `band` of an [n, k] weight of `format` lies in the data (scale) region, in
// bytes: [begin, begin + bytes), the same range in both layouts; its rows.
struct SwapAbBand {
  int64_t rows = 0;
  int64_t data_begin = 0, data_bytes = 0;
  int64_t scales_begin = 0, scales_bytes = 0;  // NVFP4's (INT8's scales are not moved)
};
SwapAbBand SwapAbBandOf(QuantFormat format, int64_t n, int64_t k, int64_t band);
inline int64_t SwapAbBands(int64_t n) { return (n + kSwapAbBandRows - 1) / kSwapAbBandRows; }

}  // namespace gemmd

#endif  // GEMMD_KERNELS_QUANT_PREPACK_H_
