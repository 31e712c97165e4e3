// DevicePlacement on its own: least outstanding work, lanes, faults and their orphans.
#include "server/scheduling/device_placement.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/fake_device.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;

FormedBatch Work(double flops) {
  FormedBatch batch;
  batch.flops = flops;
  batch.batch.jobs.push_back(std::make_unique<Job>());
  return batch;
}

TEST(DevicePlacementTest, BatchesGoWhereTheLeastWorkIsWhileLanesAreFree) {
  FakeDevice zero(false, /*lanes=*/2, 0), one(false, /*lanes=*/1, 1);
  zero.set_max_batch_bytes(500);
  one.set_max_batch_bytes(300);
  DevicePlacement placement({&zero, &one});
  EXPECT_EQ(placement.max_batch_bytes(), 300);  // the smaller
  EXPECT_EQ(placement.healthy_devices(), 2);
  EXPECT_TRUE(placement.AnyIdle());
  EXPECT_EQ(placement.Pick(), 0);  // a tie: the first
  placement.Place(0, Work(100));
  EXPECT_EQ(placement.Pick(), 1);
  EXPECT_TRUE(placement.AnyIdle());  // device 1 has every lane free
  placement.Place(1, Work(10));
  EXPECT_FALSE(placement.AnyIdle());
  EXPECT_EQ(placement.Pick(), 0);  // 1 has no free lane
  EXPECT_EQ(placement.Pick(/*required=*/1), -1);
  placement.Place(0, Work(1));
  EXPECT_EQ(placement.Pick(), -1);
  FormedBatch taken;
  ASSERT_TRUE(placement.TakePlaced(0, &taken));
  EXPECT_EQ(taken.flops, 100);  // the oldest
  ASSERT_TRUE(placement.TakePlaced(0, &taken));
  EXPECT_FALSE(placement.TakePlaced(0, &taken));
  placement.Done(0, 100);
  EXPECT_EQ(placement.Pick(), 0);
  placement.Done(1, 10);
  EXPECT_EQ(placement.Pick(), 1);  // 0 still has 1 FLOP outstanding
}

TEST(DevicePlacementTest, AFaultedDeviceGetsNothingMoreAndItsWaitingBatchesMove) {
  FakeDevice zero(false, 2, 0), one(false, 1, 1);
  DevicePlacement placement({&zero, &one});
  placement.Place(0, Work(5));
  placement.Place(0, Work(7));
  FormedBatch running;
  ASSERT_TRUE(placement.TakePlaced(0, &running));  // a lane runs the first
  EXPECT_EQ(placement.MarkUnhealthy(0), 1);        // the second had not started
  EXPECT_EQ(placement.MarkUnhealthy(0), -1);
  EXPECT_EQ(placement.healthy_devices(), 1);
  EXPECT_FALSE(placement.healthy(0));
  ASSERT_TRUE(placement.has_orphans());
  EXPECT_EQ(placement.next_orphan().flops, 7);
  EXPECT_EQ(placement.Pick(), 1);
  EXPECT_EQ(placement.Pick(0), -1);
  placement.Place(1, placement.TakeOrphan());
  EXPECT_FALSE(placement.has_orphans());
  placement.Done(0, 5);  // the faulted device's lane: no longer counted
  EXPECT_EQ(placement.Pick(0), -1);
}

}  // namespace
}  // namespace gemmd
