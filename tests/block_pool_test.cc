#include "server/devices/block_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <vector>

namespace gemmd {
namespace {

// Chunks from the heap, counted, so the tests see what the pool asks for and gives back;
// after `fail_after` chunks, none.
struct Chunks {
  int allocated = 0;
  int freed = 0;
  int fail_after = 1 << 30;
  std::function<char*(size_t)> allocate() {
    return [this](size_t bytes) -> char* {
      if (allocated == fail_after) return nullptr;
      ++allocated;
      return static_cast<char*>(std::aligned_alloc(4096, bytes));
    };
  }
  std::function<void(char*)> free() {
    return [this](char* chunk) {
      ++freed;
      std::free(chunk);
    };
  }
};

BlockPool::Options SmallOptions() {
  BlockPool::Options options;
  options.min_block = 1 << 10;
  options.max_block = 4 << 10;
  options.chunk_bytes = 16 << 10;
  options.max_bytes = 32 << 10;  // two chunks, allocated when the pool is made
  return options;
}

TEST(BlockPoolTest, ServesSizesAboveHalfTheSmallestBlockUpToTheLargest) {
  Chunks chunks;
  BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
  EXPECT_FALSE(pool.Serves(512));
  EXPECT_TRUE(pool.Serves(513));
  EXPECT_TRUE(pool.Serves(4 << 10));
  EXPECT_FALSE(pool.Serves((4 << 10) + 1));
  EXPECT_EQ(pool.Allocate(512), nullptr);
  EXPECT_EQ(pool.Allocate(5 << 10), nullptr);
}

TEST(BlockPoolTest, EveryChunkIsAllocatedWhenThePoolIsMadeAndNeverAfter) {
  Chunks chunks;
  BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
  EXPECT_EQ(chunks.allocated, 2);
  EXPECT_EQ(pool.held_bytes(), size_t{32} << 10);
  std::vector<char*> held;
  for (char* b = pool.Allocate(4 << 10); b != nullptr; b = pool.Allocate(4 << 10)) {
    held.push_back(b);
  }
  EXPECT_EQ(held.size(), 8u);
  EXPECT_EQ(chunks.allocated, 2);
}

TEST(BlockPoolTest, BlocksOfASizeComeInAddressOrderAndBackFirstInFirstOut) {
  Chunks chunks;
  BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
  // 3 KiB takes a 4 KiB block: a 16 KiB chunk holds four, one after the other.
  std::vector<char*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.Allocate(3 << 10));
  for (int i = 1; i < 4; ++i) EXPECT_EQ(blocks[i], blocks[i - 1] + (4 << 10)) << i;
  for (char* b : blocks) EXPECT_TRUE(pool.Owns(b));
  EXPECT_TRUE(pool.Owns(blocks[3] + (4 << 10) - 1));
  // One past the chunk is no block of it (the other chunk may begin right there).
  EXPECT_FALSE(pool.SameChunk(blocks[3], blocks[3] + (4 << 10)));
  // Freed in turn, handed out again in the same order (a batch's results stay adjacent).
  for (char* b : blocks) pool.Free(b, 3 << 10);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pool.Allocate(4 << 10), blocks[i]) << i;
}

TEST(BlockPoolTest, EachSizeHasItsOwnBlocksAndBlocksNeverOverlap) {
  Chunks chunks;
  BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
  std::set<char*> seen;
  char* small = pool.Allocate(600);  // a 1 KiB block
  char* middle = pool.Allocate(2 << 10);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(middle, nullptr);
  for (int i = 1; i < 16; ++i) {
    char* b = pool.Allocate(1 << 10);
    ASSERT_NE(b, nullptr) << i;
    EXPECT_TRUE(seen.insert(b).second);
    EXPECT_TRUE(b < middle || b >= middle + (2 << 10));
  }
  EXPECT_FALSE(seen.count(small));
}

TEST(BlockPoolTest, PastItsBytesThePoolAnswersNullUntilABlockComesBack) {
  Chunks chunks;
  BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
  std::vector<char*> held;
  for (int i = 0; i < 8; ++i) {  // two chunks of four 4 KiB blocks
    char* b = pool.Allocate(4 << 10);
    ASSERT_NE(b, nullptr) << i;
    held.push_back(b);
  }
  EXPECT_EQ(pool.Allocate(4 << 10), nullptr);
  EXPECT_EQ(pool.Allocate(1 << 10), nullptr);  // no chunk left for another size either
  pool.Free(held[5], 4 << 10);
  EXPECT_EQ(pool.Allocate(4 << 10), held[5]);
  int stack_byte = 0;
  EXPECT_FALSE(pool.Owns(reinterpret_cast<char*>(&stack_byte)));
}

TEST(BlockPoolTest, SameChunkIsTrueOnlyWithinOneChunk) {
  Chunks chunks;
  BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
  std::vector<char*> held;  // every 4 KiB block of both chunks
  for (char* b = pool.Allocate(4 << 10); b != nullptr; b = pool.Allocate(4 << 10)) {
    held.push_back(b);
  }
  ASSERT_EQ(held.size(), 8u);
  EXPECT_TRUE(pool.SameChunk(held[0], held[3] + (4 << 10) - 1));  // the first chunk, whole
  EXPECT_FALSE(pool.SameChunk(held[3], held[4]));              // the next chunk, wherever it lies
  EXPECT_FALSE(pool.SameChunk(held[3], held[3] + (4 << 10)));  // one past the chunk
  int stack_byte = 0;
  EXPECT_FALSE(
      pool.SameChunk(reinterpret_cast<char*>(&stack_byte), reinterpret_cast<char*>(&stack_byte)));
}

TEST(BlockPoolTest, AChunkNotHadLeavesThePoolSmallerAndChunksGoBackWithIt) {
  Chunks chunks;
  chunks.fail_after = 1;
  {
    BlockPool pool(SmallOptions(), chunks.allocate(), chunks.free());
    EXPECT_EQ(pool.held_bytes(), size_t{16} << 10);
    EXPECT_NE(pool.Allocate(2 << 10), nullptr);  // carves the one chunk
    EXPECT_EQ(pool.Allocate(4 << 10), nullptr);  // none left for another size
  }
  EXPECT_EQ(chunks.allocated, 1);
  EXPECT_EQ(chunks.freed, 1);
}

}  // namespace
}  // namespace gemmd
