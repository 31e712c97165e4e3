// The order the FP64 kernels take their output tiles in (kernels/cuda/dense/tile_order.h):
// every tile exactly once, in groups of rows; the edge tiles apart from the full ones.
#include "kernels/cuda/dense/tile_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace gemmd::gpu::internal {
namespace {

TEST(GroupedTileTest, EveryTileExactlyOnce) {
  for (int tiles_m : {1, 2, 7, 8, 9, 16, 17, 64, 65}) {
    for (int tiles_n : {1, 3, 8, 33, 128}) {
      for (int group_m : {1, 2, 8}) {
        std::vector<int> seen(tiles_m * tiles_n, 0);
        for (int id = 0; id < tiles_m * tiles_n; ++id) {
          const TileCoord t = GroupedTile(id, tiles_m, tiles_n, group_m);
          ASSERT_GE(t.m, 0);
          ASSERT_LT(t.m, tiles_m);
          ASSERT_GE(t.n, 0);
          ASSERT_LT(t.n, tiles_n);
          ++seen[t.m * tiles_n + t.n];
        }
        for (int i = 0; i < tiles_m * tiles_n; ++i) {
          ASSERT_EQ(seen[i], 1) << "tile " << i << " of " << tiles_m << " x " << tiles_n
                                << ", groups of " << group_m;
        }
      }
    }
  }
}

TEST(GroupedTileTest, GoesDownEachColumnOfAGroup) {
  // 20 x 3 tiles in groups of 8: ids 0-23 are rows 0-7 of columns 0, 1, 2; the last group
  // has 4 rows (16-19).
  EXPECT_EQ(GroupedTile(0, 20, 3, 8).m, 0);
  EXPECT_EQ(GroupedTile(7, 20, 3, 8).m, 7);
  EXPECT_EQ(GroupedTile(8, 20, 3, 8).m, 0);
  EXPECT_EQ(GroupedTile(8, 20, 3, 8).n, 1);
  EXPECT_EQ(GroupedTile(24, 20, 3, 8).m, 8);
  EXPECT_EQ(GroupedTile(48, 20, 3, 8).m, 16);
  EXPECT_EQ(GroupedTile(52, 20, 3, 8).m, 16);
  EXPECT_EQ(GroupedTile(52, 20, 3, 8).n, 1);
  EXPECT_EQ(GroupedTile(59, 20, 3, 8).m, 19);
  EXPECT_EQ(GroupedTile(59, 20, 3, 8).n, 2);
  // Groups of 1 are row by row.
  EXPECT_EQ(GroupedTile(5, 4, 3, 1).m, 1);
  EXPECT_EQ(GroupedTile(5, 4, 3, 1).n, 2);
}

TEST(EdgeTileTest, EveryPartialTileExactlyOnceAndNoFullOne) {
  // 128 x 64 tiles over M and N, as the FP64 kernels' edge launch sees them.
  for (int m : {1, 64, 127, 128, 129, 300, 512}) {
    for (int n : {1, 63, 64, 65, 200, 256}) {
      const int tiles_m = (m + 127) / 128, tiles_n = (n + 63) / 64;
      const int full_m = m / 128, full_n = n / 64;
      const int edges = tiles_m * tiles_n - full_m * full_n;
      std::vector<int> seen(tiles_m * tiles_n, 0);
      for (int id = 0; id < edges; ++id) {
        const TileCoord t = EdgeTile(id, tiles_m, tiles_n, full_m, full_n);
        ASSERT_GE(t.m, 0);
        ASSERT_LT(t.m, tiles_m);
        ASSERT_GE(t.n, 0);
        ASSERT_LT(t.n, tiles_n);
        ASSERT_TRUE(t.m >= full_m || t.n >= full_n)
            << "full tile " << t.m << "," << t.n << " in the edge launch of " << m << " x " << n;
        ++seen[t.m * tiles_n + t.n];
      }
      for (int i = 0; i < tiles_m * tiles_n; ++i) {
        const bool full = i / tiles_n < full_m && i % tiles_n < full_n;
        ASSERT_EQ(seen[i], full ? 0 : 1) << "tile " << i << " of " << m << " x " << n;
      }
    }
  }
}

TEST(EdgeTileTest, LastColumnThenLastRow) {
  // 3 x 4 tiles, 2 x 3 full: the column (0..2, 3) first, then (2, 0..2).
  EXPECT_EQ(EdgeTile(0, 3, 4, 2, 3).m, 0);
  EXPECT_EQ(EdgeTile(0, 3, 4, 2, 3).n, 3);
  EXPECT_EQ(EdgeTile(2, 3, 4, 2, 3).m, 2);
  EXPECT_EQ(EdgeTile(2, 3, 4, 2, 3).n, 3);
  EXPECT_EQ(EdgeTile(3, 3, 4, 2, 3).m, 2);
  EXPECT_EQ(EdgeTile(3, 3, 4, 2, 3).n, 0);
  EXPECT_EQ(EdgeTile(5, 3, 4, 2, 3).n, 2);
  // N whole: only the last row.
  EXPECT_EQ(EdgeTile(1, 3, 4, 2, 4).m, 2);
  EXPECT_EQ(EdgeTile(1, 3, 4, 2, 4).n, 1);
}

}  // namespace
}  // namespace gemmd::gpu::internal
