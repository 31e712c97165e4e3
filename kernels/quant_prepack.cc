#include "kernels/quant_prepack.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

// For lane L's nibble i of step j in a super-tile: the weight row (0..15 in the tile) and
// the K offset (0..63) it holds (see the header).
struct Source {
  int row, k;
};
constexpr Source Nvfp4SourceOf(int lane, int j, int i) {
  const int g = lane / 4, t = lane % 4;
  constexpr int kDeltaK[8] = {0, 0, 8, 8, 1, 1, 9, 9};
  return {g + 8 * (i % 2), 16 * j + 2 * t + kDeltaK[i]};
}

// INT8: byte b (0..7) of lane L's step j holds row (g or g + 8) at K c + offset.
constexpr Source Int8SourceOf(int lane, int j, int b) {
  const int g = lane / 4, t = lane % 4;
  return {g + 8 * ((b / 2) % 2), 16 * j + 2 * t + 8 * (b / 4) + b % 2};
}

// Calls f(super-tile base row, base K, super-tile number) for every super-tile.
template <typename F>
void ForEachSuperTile(int64_t n, int64_t k, F&& f) {
  for (int64_t rt = 0; rt < n / kSwapAbRows; ++rt) {
    for (int64_t kt = 0; kt < k / kSwapAbK; ++kt) {
      f(rt * kSwapAbRows, kt * kSwapAbK, SwapAbTileIndex(n, k, rt, kt));
    }
  }
}

// The NVFP4 layout as pairs of places, one call each: code(packed nibble, canonical nibble)
// (nibble i: byte i / 2, low nibble first) and scale(packed byte, canonical byte), the
// packed scale byte counted from the start of the scale region.
template <typename Code, typename Scale>
void ForEachNvfp4Place(int64_t n, int64_t k, Code&& code, Scale&& scale) {
  ForEachSuperTile(n, k, [&](int64_t r0, int64_t k0, int64_t tile) {
    const int64_t at = tile * kSwapAbCodeTileBytes;
    const int64_t scales_at = tile * kSwapAbScaleTileBytes;
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        for (int i = 0; i < 8; ++i) {
          const Source src = Nvfp4SourceOf(lane, j, i);
          code(2 * (at + 16 * lane + 4 * j) + i, (r0 + src.row) * k + k0 + src.k);
        }
      }
    }
    // Row r0 + g + 8h's scale of K block k0 / 16 + j at 8g + 2j + h.
    for (int g = 0; g < 8; ++g) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          scale(scales_at + 8 * g + 2 * j + h, (r0 + g + 8 * h) * (k / 16) + k0 / 16 + j);
        }
      }
    }
  });
}

// The INT8 values' places: f(packed byte, canonical byte).
template <typename F>
void ForEachInt8Place(int64_t n, int64_t k, F&& f) {
  ForEachSuperTile(n, k, [&](int64_t r0, int64_t k0, int64_t tile) {
    const int64_t at = tile * kSwapAbInt8TileBytes;
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        for (int b = 0; b < 8; ++b) {
          const Source src = Int8SourceOf(lane, j, b);
          f(at + 32 * lane + 8 * j + b, (r0 + src.row) * k + k0 + src.k);
        }
      }
    }
  });
}

// Nibble `to_index` of `to` = nibble `from_index` of `from`.
void CopyNibble(const uint8_t* from, int64_t from_index, uint8_t* to, int64_t to_index) {
  const uint8_t code = (from[from_index / 2] >> (4 * (from_index % 2))) & 0x0F;
  uint8_t& byte = to[to_index / 2];
  byte = to_index % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | code)
                           : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
}

absl::Status CheckFits(int64_t n, int64_t k) {
  if (Nvfp4SwapAbFits(n, k)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the swap-AB layout needs rows % 16 == 0 and K % 64 == 0; got [", n, ", ", k, "]"));
}

}  // namespace

int64_t SwapAbTileIndex(int64_t n, int64_t k, int64_t rt, int64_t kt) {
  const int64_t band = rt / kSwapAbBandTiles;
  const int64_t band_tiles = std::min(kSwapAbBandTiles, n / kSwapAbRows - band * kSwapAbBandTiles);
  return band * kSwapAbBandTiles * (k / kSwapAbK) + kt * band_tiles + rt % kSwapAbBandTiles;
}

bool Nvfp4SwapAbFits(int64_t n, int64_t k) {
  return n > 0 && k > 0 && n % kSwapAbRows == 0 && k % kSwapAbK == 0;
}

absl::Status PrepackNvfp4SwapAb(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                                uint8_t* out) {
  return PrepackNvfp4SwapAbRegions(codes, scales, n, k, out, out + n * k / 2);
}

absl::Status PrepackNvfp4SwapAbRegions(const uint8_t* codes, const uint8_t* scales, int64_t n,
                                       int64_t k, uint8_t* out_codes, uint8_t* out_scales) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachNvfp4Place(
      n, k,
      [&](int64_t packed, int64_t canonical) { CopyNibble(codes, canonical, out_codes, packed); },
      [&](int64_t packed, int64_t canonical) { out_scales[packed] = scales[canonical]; });
  return absl::OkStatus();
}

absl::Status UnpackNvfp4SwapAb(const uint8_t* packed, int64_t n, int64_t k, uint8_t* codes,
                               uint8_t* scales) {
  return UnpackNvfp4SwapAbRegions(packed, packed + n * k / 2, n, k, codes, scales);
}

absl::Status UnpackNvfp4SwapAbRegions(const uint8_t* packed_codes, const uint8_t* packed_scales,
                                      int64_t n, int64_t k, uint8_t* codes, uint8_t* scales) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachNvfp4Place(
      n, k,
      [&](int64_t at, int64_t canonical) {
        if (codes != nullptr) CopyNibble(packed_codes, at, codes, canonical);
      },
      [&](int64_t at, int64_t canonical) {
        if (scales != nullptr) scales[canonical] = packed_scales[at];
      });
  return absl::OkStatus();
}

absl::Status PrepackInt8SwapAb(const int8_t* values, const uint8_t* scales, int64_t n, int64_t k,
                               uint8_t* out) {
  if (absl::Status packed = PrepackInt8SwapAbValues(values, n, k, out); !packed.ok()) {
    return packed;
  }
  std::memcpy(out + n * k, scales, static_cast<size_t>(4 * n));
  return absl::OkStatus();
}

absl::Status PrepackInt8SwapAbValues(const int8_t* values, int64_t n, int64_t k, uint8_t* out) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachInt8Place(n, k, [&](int64_t packed, int64_t canonical) {
    out[packed] = static_cast<uint8_t>(values[canonical]);
  });
  return absl::OkStatus();
}

absl::Status UnpackInt8SwapAb(const uint8_t* packed, int64_t n, int64_t k, int8_t* values,
                              uint8_t* scales) {
  if (absl::Status unpacked = UnpackInt8SwapAbValues(packed, n, k, values); !unpacked.ok()) {
    return unpacked;
  }
  std::memcpy(scales, packed + n * k, static_cast<size_t>(4 * n));
  return absl::OkStatus();
}

absl::Status UnpackInt8SwapAbValues(const uint8_t* packed_values, int64_t n, int64_t k,
                                    int8_t* values) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachInt8Place(n, k, [&](int64_t at, int64_t canonical) {
    values[canonical] = static_cast<int8_t>(packed_values[at]);
  });
  return absl::OkStatus();
}

absl::Status PrepackSwapAbInBands(QuantFormat format, const uint8_t* data, const uint8_t* scales,
                                  int64_t n, int64_t k, int64_t band_rows, uint8_t* out) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  if (band_rows <= 0 || band_rows % kSwapAbRows != 0 || band_rows > kSwapAbBandRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "swap-AB bands hold a multiple of 16 rows up to ", kSwapAbBandRows, "; got ", band_rows));
  }
  const bool int8 = format == QuantFormat::kInt8;
  const int64_t row_bytes = int8 ? k : k / 2;
  for (int64_t r0 = 0; r0 < n; r0 += band_rows) {
    const int64_t rows = std::min(band_rows, n - r0);
    const absl::Status slab =
        int8 ? PrepackInt8SwapAbValues(reinterpret_cast<const int8_t*>(data) + r0 * k, rows, k,
                                       out + r0 * k)
             : PrepackNvfp4SwapAbRegions(data + r0 * row_bytes, scales + r0 * (k / 16), rows, k,
                                         out + r0 * row_bytes, out + n * row_bytes + r0 * (k / 16));
    if (!slab.ok()) return slab;
  }
  if (int8) std::memcpy(out + n * k, scales, static_cast<size_t>(4 * n));
  return absl::OkStatus();
}

const char* WeightLayoutName(WeightLayout layout) {
  return layout == WeightLayout::kSwapAb ? "swap-ab" : "canonical";
}

SwapAbBand SwapAbBandOf(QuantFormat format, int64_t n, int64_t k, int64_t band) {
  SwapAbBand b;
  const int64_t first = band * kSwapAbBandRows;
  b.rows = std::clamp<int64_t>(n - first, 0, kSwapAbBandRows);
  const int64_t row_bytes = format == QuantFormat::kInt8 ? k : k / 2;
  b.data_begin = first * row_bytes;
  b.data_bytes = b.rows * row_bytes;
  if (format == QuantFormat::kNvfp4) {
    b.scales_begin = first * (k / 16);
    b.scales_bytes = b.rows * (k / 16);
  }
  return b;
}

absl::Status RelayoutSwapAbInPlace(QuantFormat format, int64_t n, int64_t k, uint8_t* data,
                                   uint8_t* scales) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  // A band is itself a weight in the layout, in its own canonical range: the canonical
  // band is copied aside and written back re-laid out over itself.
  const SwapAbBand first = SwapAbBandOf(format, n, k, 0);
  std::vector<uint8_t> scratch(static_cast<size_t>(first.data_bytes + first.scales_bytes));
  for (int64_t band = 0; band < SwapAbBands(n); ++band) {
    const SwapAbBand b = SwapAbBandOf(format, n, k, band);
    uint8_t* const band_data = data + b.data_begin;
    std::memcpy(scratch.data(), band_data, static_cast<size_t>(b.data_bytes));
    if (format == QuantFormat::kInt8) {
      if (absl::Status s = PrepackInt8SwapAbValues(reinterpret_cast<const int8_t*>(scratch.data()),
                                                   b.rows, k, band_data);
          !s.ok()) {
        return s;
      }
      continue;
    }
    uint8_t* const band_scales = scales + b.scales_begin;
    std::memcpy(scratch.data() + b.data_bytes, band_scales, static_cast<size_t>(b.scales_bytes));
    if (absl::Status s = PrepackNvfp4SwapAbRegions(scratch.data(), scratch.data() + b.data_bytes,
                                                   b.rows, k, band_data, band_scales);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gemmd
