#include "server/rpc/host_memory.h"

#include <gtest/gtest.h>

#include <cstring>

#include "absl/strings/match.h"

namespace gemmd {
namespace {

TEST(HostMemoryTest, ReservationsCountUntilReleasedAndRefusePastTheCap) {
  auto memory = HostMemory::Create(/*max_bytes=*/1000, /*max_pooled_bytes=*/0);
  absl::StatusOr<Reservation> a = memory->Reserve(600);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(memory->reserved_bytes(), 600);
  absl::StatusOr<Reservation> b = memory->Reserve(500);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.status().message(),
            "server busy: requests hold 600 bytes, this one needs 500 more "
            "(--max_inflight_bytes=1000); retry later");
  EXPECT_FALSE(memory->Full());
  ASSERT_TRUE(a->Resize(1000).ok());
  EXPECT_TRUE(memory->Full());
  EXPECT_EQ(a->Resize(1001).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a->bytes(), 1000);
  ASSERT_TRUE(a->Resize(100).ok());
  EXPECT_EQ(memory->reserved_bytes(), 100);
  Reservation moved = *std::move(a);
  EXPECT_EQ(memory->reserved_bytes(), 100);
  moved = Reservation();
  EXPECT_EQ(memory->reserved_bytes(), 0);
}

TEST(HostMemoryTest, NoCapMeansNoRefusal) {
  auto memory = HostMemory::Create(0, 0);
  absl::StatusOr<Reservation> huge = memory->Reserve(int64_t{1} << 50);
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(memory->Full());
}

// A result buffer stays counted while it lives (inside a gRPC slice, say), goes back to
// the pool when released, and comes back for a result of a similar size.
TEST(HostMemoryTest, HostBuffersArePooledAndReused) {
  auto memory = HostMemory::Create(1 << 20, 1 << 20);
  absl::StatusOr<std::unique_ptr<HostBuffer>> first = memory->AcquireBuffer(4096);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)->size(), 4096u);
  std::memset((*first)->data(), 7, 4096);
  const char* address = (*first)->data();
  EXPECT_EQ(memory->reserved_bytes(), 4096);
  first->reset();
  EXPECT_EQ(memory->reserved_bytes(), 0);
  EXPECT_EQ(memory->pooled_bytes(), 4096);
  EXPECT_EQ(memory->pooled_buffers(), 1u);

  // 3000 bytes reuse the 4096-byte buffer (within twice its size); 1000 do not.
  absl::StatusOr<std::unique_ptr<HostBuffer>> second = memory->AcquireBuffer(3000);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)->data(), address);
  EXPECT_EQ((*second)->size(), 3000u);
  EXPECT_EQ((*second)->capacity(), 4096u);
  EXPECT_EQ(memory->reserved_bytes(), 4096);
  EXPECT_EQ(memory->pooled_bytes(), 0);
  second->reset();
  absl::StatusOr<std::unique_ptr<HostBuffer>> small = memory->AcquireBuffer(1000);
  ASSERT_TRUE(small.ok());
  EXPECT_NE((*small)->data(), address);
  EXPECT_EQ(memory->pooled_bytes(), 4096);
}

// Pooled buffers count against the cap: work that needs their room frees them, and a
// buffer that would push pooled + in-flight over the cap is freed, not kept.
TEST(HostMemoryTest, PooledBuffersGiveWayToWork) {
  auto memory = HostMemory::Create(10000, 10000);
  {
    absl::StatusOr<std::unique_ptr<HostBuffer>> a = memory->AcquireBuffer(4000);
    absl::StatusOr<std::unique_ptr<HostBuffer>> b = memory->AcquireBuffer(4000);
    ASSERT_TRUE(a.ok() && b.ok());
  }
  EXPECT_EQ(memory->pooled_bytes(), 8000);
  absl::StatusOr<Reservation> work = memory->Reserve(5000);
  ASSERT_TRUE(work.ok()) << work.status();
  EXPECT_EQ(memory->pooled_bytes(), 4000);  // the oldest buffer made room
  EXPECT_LE(memory->reserved_bytes() + memory->pooled_bytes(), 10000);
  {
    absl::StatusOr<std::unique_ptr<HostBuffer>> c = memory->AcquireBuffer(4500);
    ASSERT_TRUE(c.ok()) << c.status();  // the pooled 4000 is too small: a new one
    EXPECT_EQ(memory->pooled_bytes(), 0);
    EXPECT_EQ(memory->reserved_bytes(), 9500);
  }
  // Released with 5000 still in use: 4500 fits beside it.
  EXPECT_EQ(memory->pooled_bytes(), 4500);
  EXPECT_EQ(memory->reserved_bytes(), 5000);
}

TEST(HostMemoryTest, PoolLimitsAreKept) {
  auto memory = HostMemory::Create(0, /*max_pooled_bytes=*/5000, /*max_pooled_buffers=*/2);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> a = memory->AcquireBuffer(1000);
    absl::StatusOr<std::unique_ptr<HostBuffer>> b = memory->AcquireBuffer(1000);
    absl::StatusOr<std::unique_ptr<HostBuffer>> c = memory->AcquireBuffer(1000);
  }
  EXPECT_EQ(memory->pooled_buffers(), 2u);
  EXPECT_EQ(memory->pooled_bytes(), 2000);
  { absl::StatusOr<std::unique_ptr<HostBuffer>> big = memory->AcquireBuffer(6000); }
  EXPECT_EQ(memory->pooled_bytes(), 2000);  // over max_pooled_bytes: freed
}

TEST(HostMemoryTest, HostBuffersRefusePastTheCap) {
  auto memory = HostMemory::Create(1000, 0);
  absl::StatusOr<std::unique_ptr<HostBuffer>> big = memory->AcquireBuffer(1001);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(big.status().message(), "--max_inflight_bytes=1000"));
  EXPECT_EQ(memory->reserved_bytes(), 0);
}

// A buffer may outlive every other owner of the HostMemory (gRPC frees slices late).
TEST(HostMemoryTest, BuffersKeepTheirHostMemoryAlive) {
  std::unique_ptr<HostBuffer> survivor;
  {
    auto memory = HostMemory::Create(1000, 1000);
    survivor = *memory->AcquireBuffer(100);
  }
  std::memset(survivor->data(), 1, survivor->size());
  survivor.reset();  // returns into a pool nobody else holds: must not crash
}

// A download's chunks take turns in the room it reserved: a buffer paid for out of the
// reservation moves its bytes there and back (Recycle), so the count never changes, and
// the cap refuses nothing the room already holds.
TEST(HostMemoryTest, BuffersPaidForByAReservationTakeTurnsInIt) {
  auto memory = HostMemory::Create(/*max_bytes=*/1000, /*max_pooled_bytes=*/1000);
  absl::StatusOr<Reservation> room = memory->Reserve(400);
  ASSERT_TRUE(room.ok());
  absl::StatusOr<Reservation> others = memory->Reserve(600);  // the cap is full now
  ASSERT_TRUE(others.ok());
  absl::StatusOr<std::unique_ptr<HostBuffer>> first = memory->AcquireBuffer(200, &*room);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<HostBuffer>> second = memory->AcquireBuffer(200, &*room);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(room->bytes(), 0);
  EXPECT_EQ(memory->reserved_bytes(), 1000);
  // A third does not fit the room or the cap.
  EXPECT_EQ(memory->AcquireBuffer(200, &*room).status().code(),
            absl::StatusCode::kResourceExhausted);
  memory->Recycle(*std::move(first), &*room);
  EXPECT_EQ(room->bytes(), 200);
  EXPECT_EQ(memory->reserved_bytes(), 1000);
  // The next chunk reuses the pooled buffer, paid for by the room again.
  absl::StatusOr<std::unique_ptr<HostBuffer>> third = memory->AcquireBuffer(200, &*room);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(room->bytes(), 0);
  memory->Recycle(*std::move(second), &*room);
  memory->Recycle(*std::move(third), &*room);
  EXPECT_EQ(room->bytes(), 400);
  *others = Reservation();
  *room = Reservation();
  EXPECT_EQ(memory->reserved_bytes(), 0);
  // A buffer of another HostMemory's reservation is paid for the usual way.
  auto elsewhere = HostMemory::Create(1000, 0);
  absl::StatusOr<Reservation> foreign = elsewhere->Reserve(100);
  ASSERT_TRUE(foreign.ok());
  absl::StatusOr<std::unique_ptr<HostBuffer>> own = memory->AcquireBuffer(50, &*foreign);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(foreign->bytes(), 100);
  EXPECT_EQ(memory->reserved_bytes(), 50);
}

}  // namespace
}  // namespace gemmd
