// Payload placement: a payload in one aligned slice is used where it arrived (when its
// size needs no page-locked buffer); anything else is copied once, byte for byte, into
// one buffer whose memory is reserved; the buffer follows the allocator's page-locking.
#include "server/rpc/payload_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "server/devices/host_copier.h"

namespace gemmd {
namespace {

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 13 + seed);
  return s;
}

// 64-byte-aligned storage, so a test can place a run at any offset from an alignment.
struct Aligned {
  explicit Aligned(const std::string& bytes, size_t offset) : storage(bytes.size() + 128) {
    char* base = reinterpret_cast<char*>(
        (reinterpret_cast<uintptr_t>(storage.data()) + 63) / 64 * 64);
    at = base + offset;
    std::memcpy(at, bytes.data(), bytes.size());
    view = absl::string_view(at, bytes.size());
  }
  std::vector<char> storage;
  char* at;
  absl::string_view view;
};

// Page-locks buffers from `from` bytes, and may from `pool_from` to `pool_to` (the CUDA
// backend's rule, its pool of page-locked blocks included, without CUDA).
class LockingAllocator : public HostAllocator {
 public:
  explicit LockingAllocator(size_t from, size_t pool_from = SIZE_MAX, size_t pool_to = SIZE_MAX)
      : from_(from), pool_from_(pool_from), pool_to_(pool_to) {}
  char* Allocate(size_t bytes) override { return plain_->Allocate(bytes); }
  void Free(char* data, size_t bytes) override { plain_->Free(data, bytes); }
  bool page_locked(size_t bytes) const override { return bytes >= from_; }
  bool may_page_lock(size_t bytes) const override {
    return page_locked(bytes) || (bytes >= pool_from_ && bytes <= pool_to_);
  }

 private:
  const size_t from_, pool_from_, pool_to_;
  const std::shared_ptr<HostAllocator> plain_ = PlainHostAllocator();
};

TEST(PayloadPlacementTest, AnAlignedPayloadInOneSliceIsUsedInPlace) {
  auto memory = HostMemory::Create(0, 0);
  const Aligned a(Bytes(4096, 1), 0);
  const wire::ByteRuns runs(a.view);
  absl::string_view view;
  absl::StatusOr<PlacedPayloads> placed = PlacePayloads(memory.get(), nullptr, {{&runs, &view}});
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->buffer, nullptr);
  EXPECT_TRUE(placed->uses_wire);
  EXPECT_EQ(view.data(), a.at);  // not copied
  EXPECT_EQ(memory->reserved_bytes(), 0);
}

TEST(PayloadPlacementTest, MisalignedOrSplitPayloadsAreCopiedOnceInOrder) {
  auto memory = HostMemory::Create(0, 0);
  const std::string whole = Bytes(10000, 2);
  const Aligned misaligned(whole, 4);  // one slice, 4 bytes past a 16-byte boundary
  wire::ByteRuns split;                // three slices
  split.Append(absl::string_view(whole).substr(0, 3));
  split.Append(absl::string_view(whole).substr(3, 5000));
  split.Append(absl::string_view(whole).substr(5003));
  const wire::ByteRuns one(misaligned.view), none;
  absl::string_view a, b, c;
  HostCopier copier(2);
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(memory.get(), &copier, {{&one, &a}, {&split, &b}, {&none, &c}});
  ASSERT_TRUE(placed.ok());
  ASSERT_NE(placed->buffer, nullptr);
  EXPECT_FALSE(placed->uses_wire);
  EXPECT_EQ(std::string(a), whole);
  EXPECT_EQ(std::string(b), whole);
  EXPECT_TRUE(c.empty());
  // Both in the one buffer, each on a 64-byte boundary.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_GE(b.data(), placed->buffer->data());
  EXPECT_LE(b.data() + b.size(), placed->buffer->data() + placed->buffer->size());
  EXPECT_EQ(memory->reserved_bytes(), static_cast<int64_t>(placed->buffer->capacity()));
}

TEST(PayloadPlacementTest, APayloadThatWantsPageLockedMemoryIsCopiedThere) {
  auto memory = HostMemory::Create(0, 0, 256, std::make_shared<LockingAllocator>(1000));
  const Aligned big(Bytes(4096, 3), 0), small(Bytes(100, 4), 0);
  const wire::ByteRuns big_runs(big.view), small_runs(small.view);
  absl::string_view big_view, small_view;
  absl::StatusOr<PlacedPayloads> placed = PlacePayloads(
      memory.get(), nullptr, {{&big_runs, &big_view}, {&small_runs, &small_view}});
  ASSERT_TRUE(placed.ok());
  EXPECT_NE(big_view.data(), big.at);  // copied: the device DMAs from page-locked memory
  EXPECT_EQ(std::string(big_view), std::string(big.view));
  EXPECT_EQ(small_view.data(), small.at);  // staged by the device from where it is
  EXPECT_TRUE(placed->uses_wire);
}

// A payload in a shared-memory region is read there whatever its size: the region is
// page-locked, or the device stages it; only a misaligned one is copied.
TEST(PayloadPlacementTest, APayloadInARegionIsReadWhereItIs) {
  auto memory = HostMemory::Create(0, 0, 256, std::make_shared<LockingAllocator>(1000));
  const Aligned big(Bytes(4096, 5), 0), misaligned(Bytes(4096, 6), 4);
  const wire::ByteRuns big_runs(big.view), misaligned_runs(misaligned.view);
  absl::string_view big_view, misaligned_view;
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(memory.get(), nullptr,
                    {{&big_runs, &big_view, nullptr, /*in_region=*/true},
                     {&misaligned_runs, &misaligned_view, nullptr, /*in_region=*/true}});
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(big_view.data(), big.at);
  EXPECT_NE(misaligned_view.data(), misaligned.at);
  EXPECT_EQ(std::string(misaligned_view), std::string(misaligned.view));
}

// For a device that gathers pieces (CUDA), a split payload stays in its pieces (no host
// copy at all; the view keeps its size, for validation), unless its size wants a
// page-locked buffer.
TEST(PayloadPlacementTest, PiecesStayPiecesForADeviceThatGathersThem) {
  auto memory = HostMemory::Create(0, 0, 256, std::make_shared<LockingAllocator>(8000));
  const std::string small = Bytes(3000, 6), big = Bytes(9000, 7);
  wire::ByteRuns small_runs, big_runs;
  small_runs.Append(absl::string_view(small).substr(0, 1000));
  small_runs.Append(absl::string_view(small).substr(1000));
  big_runs.Append(absl::string_view(big).substr(0, 5));
  big_runs.Append(absl::string_view(big).substr(5));
  absl::string_view small_view, big_view;
  std::vector<absl::string_view> small_pieces, big_pieces;
  absl::StatusOr<PlacedPayloads> placed =
      PlacePayloads(memory.get(), nullptr,
                    {{&small_runs, &small_view, &small_pieces}, {&big_runs, &big_view, &big_pieces}},
                    /*pieces_ok=*/true);
  ASSERT_TRUE(placed.ok());
  EXPECT_TRUE(placed->uses_wire);
  ASSERT_EQ(small_pieces.size(), 2u);
  EXPECT_EQ(small_pieces[0].data(), small.data());
  EXPECT_EQ(small_view.size(), 3000u);
  EXPECT_EQ(small_view.data(), nullptr);
  EXPECT_TRUE(big_pieces.empty());  // page-locked size: copied for its own DMA
  EXPECT_EQ(std::string(big_view), big);
  // Without pieces_ok the same split payload is copied.
  std::vector<absl::string_view> unused;
  placed = PlacePayloads(memory.get(), nullptr, {{&small_runs, &small_view, &unused}});
  ASSERT_TRUE(placed.ok());
  EXPECT_TRUE(unused.empty());
  EXPECT_EQ(std::string(small_view), small);
}

// A size the pool of page-locked blocks may serve counts as page-locked: the payload is
// copied where it arrived (the device then DMAs it in place), whole or in pieces, and only
// smaller ones are left for the device to gather.
TEST(PayloadPlacementTest, PayloadsThePoolMayPageLockAreCopiedNotLeftInPieces) {
  auto memory = HostMemory::Create(0, 0, 256, std::make_shared<LockingAllocator>(8000, 2000));
  const std::string small = Bytes(1500, 8), block = Bytes(3000, 9);
  const Aligned block_whole(block, 0);
  wire::ByteRuns small_runs, block_split;
  small_runs.Append(absl::string_view(small).substr(0, 700));
  small_runs.Append(absl::string_view(small).substr(700));
  block_split.Append(absl::string_view(block).substr(0, 1000));
  block_split.Append(absl::string_view(block).substr(1000));
  const wire::ByteRuns block_runs(block_whole.view);
  absl::string_view small_view, split_view, whole_view;
  std::vector<absl::string_view> small_pieces, split_pieces, whole_pieces;
  absl::StatusOr<PlacedPayloads> placed = PlacePayloads(memory.get(), nullptr,
                                                        {{&small_runs, &small_view, &small_pieces},
                                                         {&block_split, &split_view, &split_pieces},
                                                         {&block_runs, &whole_view, &whole_pieces}},
                                                        /*pieces_ok=*/true);
  ASSERT_TRUE(placed.ok());
  ASSERT_NE(placed->buffer, nullptr);
  EXPECT_EQ(small_pieces.size(), 2u);  // gathered by the device
  EXPECT_EQ(small_view.data(), nullptr);
  EXPECT_TRUE(split_pieces.empty());
  EXPECT_TRUE(whole_pieces.empty());
  EXPECT_EQ(std::string(split_view), block);
  EXPECT_EQ(std::string(whole_view), block);
  EXPECT_NE(whole_view.data(), block_whole.at);  // copied although aligned in one slice
  EXPECT_GE(split_view.data(), placed->buffer->data());
  EXPECT_LT(whole_view.data(), placed->buffer->data() + placed->buffer->size());
}

// Copied payloads share one buffer. When the pool's sizes add up to one that can never be
// page-locked (past the largest block, short of the always page-locked sizes), they are
// left for the device to stage, not copied into plain memory to be staged again.
TEST(PayloadPlacementTest, PoolSizesThatTogetherCannotBePageLockedAreLeftInPieces) {
  auto memory = HostMemory::Create(0, 0, 256, std::make_shared<LockingAllocator>(8000, 2000, 4000));
  const std::string a = Bytes(3000, 10), b = Bytes(3000, 11);
  wire::ByteRuns a_runs, b_runs;
  a_runs.Append(absl::string_view(a).substr(0, 1000));
  a_runs.Append(absl::string_view(a).substr(1000));
  b_runs.Append(absl::string_view(b).substr(0, 2000));
  b_runs.Append(absl::string_view(b).substr(2000));
  absl::string_view a_view, b_view;
  std::vector<absl::string_view> a_pieces, b_pieces;
  absl::StatusOr<PlacedPayloads> placed = PlacePayloads(
      memory.get(), nullptr, {{&a_runs, &a_view, &a_pieces}, {&b_runs, &b_view, &b_pieces}},
      /*pieces_ok=*/true);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->buffer, nullptr);
  EXPECT_EQ(a_pieces.size(), 2u);
  EXPECT_EQ(b_pieces.size(), 2u);
  EXPECT_EQ(memory->reserved_bytes(), 0);
  // Alone, the same payload fits a block: copied.
  std::vector<absl::string_view> alone_pieces;
  placed = PlacePayloads(memory.get(), nullptr, {{&a_runs, &a_view, &alone_pieces}},
                         /*pieces_ok=*/true);
  ASSERT_TRUE(placed.ok());
  ASSERT_NE(placed->buffer, nullptr);
  EXPECT_TRUE(alone_pieces.empty());
  EXPECT_EQ(std::string(a_view), a);
}

TEST(PayloadPlacementTest, TheCapRefusesTheCopy) {
  auto memory = HostMemory::Create(/*max_bytes=*/1000, 0);
  const std::string whole = Bytes(2000, 5);
  wire::ByteRuns split;
  split.Append(absl::string_view(whole).substr(0, 1000));
  split.Append(absl::string_view(whole).substr(1000));
  absl::string_view view;
  absl::StatusOr<PlacedPayloads> placed = PlacePayloads(memory.get(), nullptr, {{&split, &view}});
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(memory->reserved_bytes(), 0);
}

}  // namespace
}  // namespace gemmd
