// The grouped tile order the FP64 kernels take their output tiles in
// (kernels/cuda/dense/tile_order.h): every tile exactly once, in groups of rows.
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

}  // namespace
}  // namespace gemmd::gpu::internal
