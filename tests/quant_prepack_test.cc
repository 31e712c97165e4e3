// The swap-AB NVFP4 layout (kernels/quant_prepack.h): exact round trips, the documented
// place of codes and scales, and the shapes it refuses.
#include "kernels/quant_prepack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/quant_formats.h"

namespace gemmd {
namespace {

struct Canonical {
  std::vector<uint8_t> codes, scales;
};

Canonical RandomCanonical(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  Canonical c{std::vector<uint8_t>(n * k / 2), std::vector<uint8_t>(n * k / 16)};
  for (uint8_t& b : c.codes) b = static_cast<uint8_t>(rng());
  for (uint8_t& b : c.scales) b = static_cast<uint8_t>(rng());
  return c;
}

TEST(QuantPrepackTest, RoundTripIsExact) {
  for (auto [n, k] :
       {std::pair<int64_t, int64_t>{16, 64}, {32, 128}, {48, 192}, {16, 1024}, {160, 64}}) {
    SCOPED_TRACE(testing::Message() << n << " x " << k);
    const Canonical in = RandomCanonical(n, k, static_cast<uint32_t>(n * 131 + k));
    // The wire's bytes less its 4-byte tensor scale: nothing added.
    ASSERT_EQ(Nvfp4Bytes(n, k) - 4, static_cast<int64_t>(in.codes.size() + in.scales.size()));
    std::vector<uint8_t> packed(in.codes.size() + in.scales.size(), 0xAB);
    ASSERT_TRUE(PrepackNvfp4SwapAb(in.codes.data(), in.scales.data(), n, k, packed.data()).ok());
    Canonical out{std::vector<uint8_t>(in.codes.size(), 0x5A),
                  std::vector<uint8_t>(in.scales.size(), 0x5A)};
    ASSERT_TRUE(UnpackNvfp4SwapAb(packed.data(), n, k, out.codes.data(), out.scales.data()).ok());
    EXPECT_EQ(out.codes, in.codes);
    EXPECT_EQ(out.scales, in.scales);
  }
}

// Codes and scales that name their own place, read back where the header says they are.
TEST(QuantPrepackTest, CodesAndScalesSitWhereDocumented) {
  const int64_t n = 32, k = 128;
  auto code = [](int64_t row, int64_t col) {
    return static_cast<uint8_t>((row * 7 + col * 3) % 16);
  };
  auto scale = [](int64_t row, int64_t block) { return static_cast<uint8_t>(row * 8 + block); };
  Canonical c{std::vector<uint8_t>(n * k / 2), std::vector<uint8_t>(n * k / 16)};
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t col = 0; col < k; ++col) {
      c.codes[r * k / 2 + col / 2] |= code(r, col) << (4 * (col % 2));
    }
    for (int64_t b = 0; b < k / 16; ++b) c.scales[r * k / 16 + b] = scale(r, b);
  }
  std::vector<uint8_t> packed(c.codes.size() + c.scales.size());
  ASSERT_TRUE(PrepackNvfp4SwapAb(c.codes.data(), c.scales.data(), n, k, packed.data()).ok());
  // Super-tile (row tile 1, K tile 1): r0 = 16, k0 = 64; one band of 2 row tiles, number
  // 1 * 2 + 1.
  ASSERT_EQ(SwapAbTileIndex(n, k, 1, 1), 3);
  const uint8_t* tile = packed.data() + 512 * 3;
  const uint8_t* tile_scales = packed.data() + n * k / 2 + 64 * 3;
  const int64_t r0 = 16, k0 = 64;
  for (int lane : {0, 5, 18, 31}) {
    const int64_t g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      const int64_t col = k0 + 16 * j + 2 * t;
      const uint8_t* w = tile + 16 * lane + 4 * j;
      auto nibble = [&](int i) { return (w[i / 2] >> (4 * (i % 2))) & 0x0F; };
      EXPECT_EQ(nibble(0), code(r0 + g, col)) << lane << " " << j;
      EXPECT_EQ(nibble(1), code(r0 + g + 8, col));
      EXPECT_EQ(nibble(2), code(r0 + g, col + 8));
      EXPECT_EQ(nibble(3), code(r0 + g + 8, col + 8));
      EXPECT_EQ(nibble(4), code(r0 + g, col + 1));
      EXPECT_EQ(nibble(5), code(r0 + g + 8, col + 1));
      EXPECT_EQ(nibble(6), code(r0 + g, col + 9));
      EXPECT_EQ(nibble(7), code(r0 + g + 8, col + 9));
      EXPECT_EQ(tile_scales[8 * g + 2 * j], scale(r0 + g, k0 / 16 + j));
      EXPECT_EQ(tile_scales[8 * g + 2 * j + 1], scale(r0 + g + 8, k0 / 16 + j));
    }
  }
}

// Super-tiles are numbered band by band (16 row tiles), K tile by K tile inside a band.
TEST(QuantPrepackTest, SuperTilesAreNumberedInBands) {
  const int64_t n = 16 * 20, k = 64 * 3;  // a band of 16 row tiles, then one of 4
  EXPECT_EQ(SwapAbTileIndex(n, k, 0, 0), 0);
  EXPECT_EQ(SwapAbTileIndex(n, k, 5, 0), 5);
  EXPECT_EQ(SwapAbTileIndex(n, k, 5, 2), 2 * 16 + 5);
  EXPECT_EQ(SwapAbTileIndex(n, k, 16, 0), 16 * 3);
  EXPECT_EQ(SwapAbTileIndex(n, k, 19, 2), 16 * 3 + 2 * 4 + 3);  // the last super-tile
}

// Every band's codes and scales stay in the band's canonical ranges (what lets the repack
// run in place, one band at a time).
TEST(QuantPrepackTest, BandsKeepTheirRanges) {
  const int64_t n = 16 * 20, k = 192;  // bands of 256 and 64 rows
  Canonical c{std::vector<uint8_t>(n * k / 2), std::vector<uint8_t>(n * k / 16)};
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t band = static_cast<uint8_t>(r / 256);
    for (int64_t b = 0; b < k / 2; ++b) c.codes[r * k / 2 + b] = static_cast<uint8_t>(band * 0x11);
    for (int64_t b = 0; b < k / 16; ++b) c.scales[r * k / 16 + b] = static_cast<uint8_t>(band + 7);
  }
  std::vector<uint8_t> packed(c.codes.size() + c.scales.size());
  ASSERT_TRUE(PrepackNvfp4SwapAb(c.codes.data(), c.scales.data(), n, k, packed.data()).ok());
  for (int64_t i = 0; i < n * k / 2; ++i) {
    ASSERT_EQ(packed[i], (i / (256 * k / 2)) * 0x11) << i;
  }
  for (int64_t i = 0; i < n * k / 16; ++i) {
    ASSERT_EQ(packed[n * k / 2 + i], i / (256 * k / 16) + 7) << i;
  }
}

// Each band unpacks alone, codes and scales apart (what a download of some rows does).
TEST(QuantPrepackTest, BandsUnpackAloneFromEachRegion) {
  const int64_t n = 16 * 20, k = 192;  // bands of 256 and 64 rows
  const Canonical in = RandomCanonical(n, k, 2026);
  std::vector<uint8_t> packed(in.codes.size() + in.scales.size());
  ASSERT_TRUE(PrepackNvfp4SwapAb(in.codes.data(), in.scales.data(), n, k, packed.data()).ok());
  for (int64_t band = 0; band * kSwapAbBandRows < n; ++band) {
    const int64_t r0 = band * kSwapAbBandRows, rows = std::min(kSwapAbBandRows, n - r0);
    SCOPED_TRACE(testing::Message() << "band " << band << " (" << rows << " rows)");
    std::vector<uint8_t> codes(rows * k / 2, 0x5A), scales(rows * k / 16, 0x5A);
    ASSERT_TRUE(UnpackNvfp4SwapAbRegions(packed.data() + 128 * k * band, nullptr, rows, k,
                                         codes.data(), nullptr)
                    .ok());
    ASSERT_TRUE(UnpackNvfp4SwapAbRegions(nullptr, packed.data() + n * k / 2 + 16 * k * band, rows,
                                         k, nullptr, scales.data())
                    .ok());
    EXPECT_TRUE(std::equal(codes.begin(), codes.end(), in.codes.begin() + r0 * k / 2));
    EXPECT_TRUE(std::equal(scales.begin(), scales.end(), in.scales.begin() + r0 * k / 16));
  }
  std::vector<int8_t> values(n * k);
  std::mt19937 rng(7);
  for (int8_t& v : values) v = static_cast<int8_t>(rng());
  std::vector<uint8_t> row_scales(4 * n, 1);
  std::vector<uint8_t> packed8(n * k + 4 * n);
  ASSERT_TRUE(PrepackInt8SwapAb(values.data(), row_scales.data(), n, k, packed8.data()).ok());
  std::vector<int8_t> band1(64 * k);
  ASSERT_TRUE(UnpackInt8SwapAbValues(packed8.data() + 256 * k, 64, k, band1.data()).ok());
  EXPECT_TRUE(std::equal(band1.begin(), band1.end(), values.begin() + 256 * k));
}

// Bands of the layout's width are the layout; narrower ones are slabs prepacked alone,
// each unpacking back to its own rows (codes, scales, INT8 values; INT8 row scales after
// the values).
TEST(QuantPrepackTest, PrepackInBandsOfAnyWidth) {
  const int64_t n = 16 * 25, k = 128;  // bands of 256 rows and a short one; of 128 and of 16
  const Canonical in = RandomCanonical(n, k, 35);
  std::vector<uint8_t> whole(in.codes.size() + in.scales.size());
  ASSERT_TRUE(PrepackNvfp4SwapAb(in.codes.data(), in.scales.data(), n, k, whole.data()).ok());
  std::vector<uint8_t> banded(whole.size(), 0xAB);
  ASSERT_TRUE(PrepackSwapAbInBands(QuantFormat::kNvfp4, in.codes.data(), in.scales.data(), n, k,
                                   kSwapAbBandRows, banded.data())
                  .ok());
  EXPECT_EQ(banded, whole);
  std::mt19937 rng(36);
  std::vector<int8_t> values(n * k);
  for (int8_t& v : values) v = static_cast<int8_t>(rng());
  std::vector<uint8_t> row_scales(4 * n);
  for (uint8_t& b : row_scales) b = static_cast<uint8_t>(rng());
  for (int64_t band_rows : {int64_t{128}, int64_t{16}}) {
    SCOPED_TRACE(testing::Message() << "bands of " << band_rows);
    ASSERT_TRUE(PrepackSwapAbInBands(QuantFormat::kNvfp4, in.codes.data(), in.scales.data(), n, k,
                                     band_rows, banded.data())
                    .ok());
    std::vector<uint8_t> packed8(n * k + 4 * n);
    ASSERT_TRUE(PrepackSwapAbInBands(QuantFormat::kInt8, reinterpret_cast<uint8_t*>(values.data()),
                                     row_scales.data(), n, k, band_rows, packed8.data())
                    .ok());
    EXPECT_TRUE(std::equal(row_scales.begin(), row_scales.end(), packed8.begin() + n * k));
    for (int64_t r0 = 0; r0 < n; r0 += band_rows) {
      const int64_t rows = std::min(band_rows, n - r0);
      std::vector<uint8_t> codes(rows * k / 2), scales(rows * k / 16);
      ASSERT_TRUE(UnpackNvfp4SwapAbRegions(banded.data() + r0 * k / 2,
                                           banded.data() + n * k / 2 + r0 * k / 16, rows, k,
                                           codes.data(), scales.data())
                      .ok());
      EXPECT_TRUE(std::equal(codes.begin(), codes.end(), in.codes.begin() + r0 * k / 2)) << r0;
      EXPECT_TRUE(std::equal(scales.begin(), scales.end(), in.scales.begin() + r0 * k / 16)) << r0;
      std::vector<int8_t> slab(rows * k);
      ASSERT_TRUE(UnpackInt8SwapAbValues(packed8.data() + r0 * k, rows, k, slab.data()).ok());
      EXPECT_TRUE(std::equal(slab.begin(), slab.end(), values.begin() + r0 * k)) << r0;
    }
  }
  EXPECT_EQ(PrepackSwapAbInBands(QuantFormat::kNvfp4, in.codes.data(), in.scales.data(), n, k, 24,
                                 banded.data())
                .message(),
            "swap-AB bands hold a multiple of 16 rows up to 256; got 24");
}

TEST(QuantPrepackTest, Int8RoundTripIsExactAndNothingIsAdded) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{16, 64}, {48, 192}, {32, 1024}}) {
    SCOPED_TRACE(testing::Message() << n << " x " << k);
    std::mt19937 rng(static_cast<uint32_t>(n + k));
    std::vector<int8_t> values(n * k);
    std::vector<uint8_t> scales(4 * n);
    for (int8_t& v : values) v = static_cast<int8_t>(rng());
    for (uint8_t& b : scales) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> packed(Int8Bytes(n, k), 0xAB);
    ASSERT_EQ(packed.size(), values.size() + scales.size());
    ASSERT_TRUE(PrepackInt8SwapAb(values.data(), scales.data(), n, k, packed.data()).ok());
    std::vector<int8_t> values_out(values.size(), 0x5A);
    std::vector<uint8_t> scales_out(scales.size(), 0x5A);
    ASSERT_TRUE(UnpackInt8SwapAb(packed.data(), n, k, values_out.data(), scales_out.data()).ok());
    EXPECT_EQ(values_out, values);
    EXPECT_EQ(scales_out, scales);
  }
}

TEST(QuantPrepackTest, Int8ValuesSitWhereDocumented) {
  const int64_t n = 32, k = 128;
  auto value = [](int64_t row, int64_t col) {
    return static_cast<int8_t>((row * 5 + col * 3) % 251 - 125);
  };
  std::vector<int8_t> values(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t col = 0; col < k; ++col) values[r * k + col] = value(r, col);
  }
  std::vector<uint8_t> scales(4 * n, 7);
  std::vector<uint8_t> packed(Int8Bytes(n, k));
  ASSERT_TRUE(PrepackInt8SwapAb(values.data(), scales.data(), n, k, packed.data()).ok());
  const uint8_t* tile = packed.data() + 1024 * 3;  // row tile 1, K tile 1
  const int64_t r0 = 16, k0 = 64;
  for (int lane : {0, 7, 22, 31}) {
    const int64_t g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      const int64_t c = k0 + 16 * j + 2 * t;
      const auto* w = reinterpret_cast<const int8_t*>(tile + 32 * lane + 8 * j);
      const int8_t expected[8] = {value(r0 + g, c),         value(r0 + g, c + 1),
                                  value(r0 + g + 8, c),     value(r0 + g + 8, c + 1),
                                  value(r0 + g, c + 8),     value(r0 + g, c + 9),
                                  value(r0 + g + 8, c + 8), value(r0 + g + 8, c + 9)};
      for (int b = 0; b < 8; ++b) EXPECT_EQ(w[b], expected[b]) << lane << " " << j << " " << b;
    }
  }
  EXPECT_EQ(packed[n * k], 7);  // the row scales follow, as they were
}

// The upload's relayout: in place over the canonical bytes, band by band, the same bytes as
// the out-of-place prepack (several bands, the last one short).
TEST(QuantPrepackTest, InPlaceRelayoutEqualsThePrepack) {
  const int64_t n = 256 * 2 + 48, k = 192;
  const Canonical in = RandomCanonical(n, k, 99);
  std::vector<uint8_t> expected(in.codes.size() + in.scales.size());
  ASSERT_TRUE(PrepackNvfp4SwapAb(in.codes.data(), in.scales.data(), n, k, expected.data()).ok());
  // Stored as the tensor store keeps it: data, then the scales at an offset of their own.
  std::vector<uint8_t> stored(in.codes.size() + 256 + in.scales.size(), 0xEE);
  std::copy(in.codes.begin(), in.codes.end(), stored.begin());
  uint8_t* const scales = stored.data() + in.codes.size() + 256;
  std::copy(in.scales.begin(), in.scales.end(), scales);
  ASSERT_TRUE(RelayoutSwapAbInPlace(QuantFormat::kNvfp4, n, k, stored.data(), scales).ok());
  EXPECT_TRUE(std::equal(expected.begin(), expected.begin() + n * k / 2, stored.begin()));
  EXPECT_TRUE(std::equal(expected.begin() + n * k / 2, expected.end(), scales));
  EXPECT_EQ(stored[n * k / 2], 0xEE);  // nothing written between the regions
  // Each band's range, and the band alone unpacks to its canonical rows.
  EXPECT_EQ(SwapAbBands(n), 3);
  const SwapAbBand last = SwapAbBandOf(QuantFormat::kNvfp4, n, k, 2);
  EXPECT_EQ(last.rows, 48);
  EXPECT_EQ(last.data_begin, 512 * k / 2);
  EXPECT_EQ(last.data_bytes, 48 * k / 2);
  EXPECT_EQ(last.scales_begin, 512 * k / 16);
  EXPECT_EQ(last.scales_bytes, 48 * k / 16);
  Canonical band{std::vector<uint8_t>(last.data_bytes), std::vector<uint8_t>(last.scales_bytes)};
  ASSERT_TRUE(UnpackNvfp4SwapAbRegions(stored.data() + last.data_begin, scales + last.scales_begin,
                                       last.rows, k, band.codes.data(), band.scales.data())
                  .ok());
  EXPECT_TRUE(std::equal(band.codes.begin(), band.codes.end(), in.codes.begin() + last.data_begin));
  EXPECT_TRUE(
      std::equal(band.scales.begin(), band.scales.end(), in.scales.begin() + last.scales_begin));

  // INT8: the values move, the row scales do not.
  std::mt19937 rng(5);
  std::vector<int8_t> values(n * k);
  for (int8_t& v : values) v = static_cast<int8_t>(rng());
  std::vector<uint8_t> row_scales(4 * n, 3);
  std::vector<uint8_t> expected8(n * k + 4 * n);
  ASSERT_TRUE(PrepackInt8SwapAb(values.data(), row_scales.data(), n, k, expected8.data()).ok());
  std::vector<uint8_t> stored8(values.begin(), values.end());
  std::vector<uint8_t> scales8 = row_scales;
  ASSERT_TRUE(RelayoutSwapAbInPlace(QuantFormat::kInt8, n, k, stored8.data(), scales8.data()).ok());
  EXPECT_TRUE(std::equal(stored8.begin(), stored8.end(), expected8.begin()));
  EXPECT_EQ(scales8, row_scales);
  EXPECT_EQ(SwapAbBandOf(QuantFormat::kInt8, n, k, 1).data_begin, 256 * k);
  EXPECT_EQ(SwapAbBandOf(QuantFormat::kInt8, n, k, 1).scales_bytes, 0);
  EXPECT_EQ(RelayoutSwapAbInPlace(QuantFormat::kInt8, 24, k, stored8.data(), scales8.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(QuantPrepackTest, RefusesShapesWithoutTheLayout) {
  EXPECT_TRUE(Nvfp4SwapAbFits(16, 64));
  EXPECT_FALSE(Nvfp4SwapAbFits(8, 64));
  EXPECT_FALSE(Nvfp4SwapAbFits(16, 48));
  EXPECT_FALSE(Nvfp4SwapAbFits(0, 64));
  uint8_t byte = 0;
  const absl::Status st = PrepackNvfp4SwapAb(&byte, &byte, 24, 64, &byte);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows % 16 == 0 and K % 64 == 0; got [24, 64]"),
            absl::string_view::npos)
      << st;
  EXPECT_EQ(UnpackNvfp4SwapAb(&byte, 16, 96, &byte, &byte).code(),
            absl::StatusCode::kInvalidArgument);
  int8_t value = 0;
  EXPECT_EQ(PrepackInt8SwapAb(&value, &byte, 16, 32, &byte).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmd
