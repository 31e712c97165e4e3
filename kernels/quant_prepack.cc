#include "kernels/quant_prepack.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

// For lane L's nibble i of step j in a super-tile: the weight row (0..15 in the tile) and
// the K offset (0..63) it holds (see the header).
struct NibbleSource {
  int row, k;
};
constexpr NibbleSource SourceOf(int lane, int j, int i) {
  const int g = lane / 4, t = lane % 4;
  constexpr int kDeltaK[8] = {0, 0, 2, 2, 1, 1, 3, 3};
  return {g + 8 * (i % 2), 16 * t + 4 * j + kDeltaK[i]};
}

uint8_t CodeAt(const uint8_t* codes, int64_t k, int64_t row, int64_t col) {
  const uint8_t byte = codes[row * (k / 2) + col / 2];
  return col % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
}

// Calls f(super-tile base row, base K, super-tile offset) for every super-tile of
// `tile_bytes` bytes.
template <typename F>
void ForEachSuperTile(int64_t n, int64_t k, int64_t tile_bytes, F&& f) {
  const int64_t k_tiles = k / kSwapAbK;
  for (int64_t rt = 0; rt < n / kSwapAbRows; ++rt) {
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      f(rt * kSwapAbRows, kt * kSwapAbK, (rt * k_tiles + kt) * tile_bytes);
    }
  }
}

// INT8: byte b (0..7) of lane L's step j holds row (g or g + 8) at K c + offset.
NibbleSource Int8SourceOf(int lane, int j, int b) {
  const int g = lane / 4, t = lane % 4;
  return {g + 8 * ((b / 2) % 2), 16 * t + 4 * j + 2 * (b / 4) + b % 2};
}

absl::Status CheckFits(int64_t n, int64_t k) {
  if (Nvfp4SwapAbFits(n, k)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the swap-AB NVFP4 layout needs rows % 16 == 0 and K % 64 == 0; got [", n, ", ", k, "]"));
}

}  // namespace

bool Nvfp4SwapAbFits(int64_t n, int64_t k) {
  return n > 0 && k > 0 && n % kSwapAbRows == 0 && k % kSwapAbK == 0;
}

absl::Status PrepackNvfp4SwapAb(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k,
                                uint8_t* out) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachSuperTile(n, k, kSwapAbSuperTileBytes, [&](int64_t r0, int64_t k0, int64_t at) {
    uint8_t* tile = out + at;
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        for (int b = 0; b < 4; ++b) {
          uint8_t byte = 0;
          for (int half = 0; half < 2; ++half) {
            const NibbleSource src = SourceOf(lane, j, 2 * b + half);
            byte |= CodeAt(codes, k, r0 + src.row, k0 + src.k) << (4 * half);
          }
          tile[16 * lane + 4 * j + b] = byte;
        }
      }
      const int g = lane / 4, t = lane % 4;
      const int64_t block = k0 / 16 + t;
      tile[512 + 2 * lane] = scales[(r0 + g) * (k / 16) + block];
      tile[512 + 2 * lane + 1] = scales[(r0 + g + 8) * (k / 16) + block];
    }
  });
  return absl::OkStatus();
}

absl::Status UnpackNvfp4SwapAb(const uint8_t* packed, int64_t n, int64_t k, uint8_t* codes,
                               uint8_t* scales) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachSuperTile(n, k, kSwapAbSuperTileBytes, [&](int64_t r0, int64_t k0, int64_t at) {
    const uint8_t* tile = packed + at;
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        for (int i = 0; i < 8; ++i) {
          const uint8_t code = (tile[16 * lane + 4 * j + i / 2] >> (4 * (i % 2))) & 0x0F;
          const NibbleSource src = SourceOf(lane, j, i);
          const int64_t col = k0 + src.k;
          uint8_t& byte = codes[(r0 + src.row) * (k / 2) + col / 2];
          byte = col % 2 == 0 ? static_cast<uint8_t>((byte & 0xF0) | code)
                              : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
        }
      }
      const int g = lane / 4, t = lane % 4;
      const int64_t block = k0 / 16 + t;
      scales[(r0 + g) * (k / 16) + block] = tile[512 + 2 * lane];
      scales[(r0 + g + 8) * (k / 16) + block] = tile[512 + 2 * lane + 1];
    }
  });
  return absl::OkStatus();
}

absl::Status PrepackInt8SwapAb(const int8_t* values, const uint8_t* scales, int64_t n, int64_t k,
                               uint8_t* out) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachSuperTile(n, k, kSwapAbInt8SuperTileBytes, [&](int64_t r0, int64_t k0, int64_t at) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        for (int b = 0; b < 8; ++b) {
          const NibbleSource src = Int8SourceOf(lane, j, b);
          out[at + 32 * lane + 8 * j + b] =
              static_cast<uint8_t>(values[(r0 + src.row) * k + k0 + src.k]);
        }
      }
    }
  });
  std::memcpy(out + n * k, scales, static_cast<size_t>(4 * n));
  return absl::OkStatus();
}

absl::Status UnpackInt8SwapAb(const uint8_t* packed, int64_t n, int64_t k, int8_t* values,
                              uint8_t* scales) {
  if (absl::Status fits = CheckFits(n, k); !fits.ok()) return fits;
  ForEachSuperTile(n, k, kSwapAbInt8SuperTileBytes, [&](int64_t r0, int64_t k0, int64_t at) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int j = 0; j < 4; ++j) {
        for (int b = 0; b < 8; ++b) {
          const NibbleSource src = Int8SourceOf(lane, j, b);
          values[(r0 + src.row) * k + k0 + src.k] =
              static_cast<int8_t>(packed[at + 32 * lane + 8 * j + b]);
        }
      }
    }
  });
  std::memcpy(scales, packed + n * k, static_cast<size_t>(4 * n));
  return absl::OkStatus();
}

}  // namespace gemmd
