// BatchQueues on its own: when a queue is ready, which goes first, what a batch takes.
#include "server/scheduling/batch_queues.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/fake_device.h"

namespace gemmd {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

std::unique_ptr<Job> JobOf(int64_t m, const void* shared_b = nullptr) {
  auto job = std::make_unique<Job>();
  job->kernel = &testing::TheFakeKernel();
  job->problem.m = m;
  job->problem.n = 2;
  job->problem.k = 1;
  job->shared_b = shared_b;
  job->accepted = kT0;
  return job;
}

BatchQueues::Options Options(uint32_t max_batch_size, absl::Duration delay) {
  BatchQueues::Options o;
  o.max_batch_size = max_batch_size;
  o.max_queue_delay = delay;
  return o;
}

TEST(BatchQueuesTest, AQueueIsReadyWhenFullDueOrToldAndTheOldestHeadGoesFirst) {
  BatchQueues queues(Options(3, absl::Milliseconds(1)));
  EXPECT_TRUE(queues.Push(JobOf(2), 100, kT0));   // a new queue: a new due time
  EXPECT_TRUE(queues.Push(JobOf(1), 100, kT0 + absl::Microseconds(10)));
  EXPECT_FALSE(queues.Push(JobOf(2), 100, kT0 + absl::Microseconds(20)));  // still filling
  EXPECT_EQ(queues.jobs(), 3u);
  EXPECT_EQ(queues.bytes(), 300);
  absl::Time due;
  EXPECT_EQ(queues.NextReady(kT0, false, &due), nullptr);
  EXPECT_EQ(due, kT0 + absl::Milliseconds(1));  // the m = 2 queue's head
  const BatchKey* told = queues.NextReady(kT0, /*go=*/true, &due);
  ASSERT_NE(told, nullptr);
  EXPECT_EQ(told->m, 2);  // its head came first
  EXPECT_TRUE(queues.Push(JobOf(2), 100, kT0 + absl::Microseconds(30)));  // now full
  const BatchKey* full = queues.NextReady(kT0 + absl::Microseconds(30), false, &due);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(full->m, 2);
  std::vector<DroppedJob> dropped;
  FormedBatch batch = queues.Take(*full, kT0, &dropped);
  EXPECT_TRUE(dropped.empty());
  ASSERT_EQ(batch.batch.jobs.size(), 3u);
  EXPECT_EQ(batch.bytes, 300);
  EXPECT_EQ(batch.flops, 3 * 2.0 * 2 * 2 * 1);
  EXPECT_EQ(batch.batch.problem.batch, 3);  // packed
  EXPECT_FALSE(batch.batch.stacked);
  EXPECT_EQ(queues.jobs(), 1u);
  EXPECT_EQ(queues.bytes(), 100);
  // The m = 1 queue comes due on its own.
  const BatchKey* due_one = queues.NextReady(kT0 + absl::Milliseconds(2), false, &due);
  ASSERT_NE(due_one, nullptr);
  EXPECT_EQ(due_one->m, 1);
}

TEST(BatchQueuesTest, TakeStopsAtTheByteCapDropsTheExpiredAndStacksSharedWeights) {
  BatchQueues::Options o = Options(8, absl::ZeroDuration());
  o.max_batch_bytes = 250;
  BatchQueues queues(o);
  float b = 0;
  std::unique_ptr<Job> expired = JobOf(3, &b);
  expired->deadline = kT0 - absl::Seconds(1);
  queues.Push(JobOf(1, &b), 100, kT0);
  queues.Push(std::move(expired), 100, kT0);
  queues.Push(JobOf(2, &b), 100, kT0);
  queues.Push(JobOf(4, &b), 100, kT0);  // over the cap with the two before it
  absl::Time due;
  const BatchKey* key = queues.NextReady(kT0, false, &due);
  ASSERT_NE(key, nullptr);
  EXPECT_TRUE(key->stacked);  // any M against one resident B
  std::vector<DroppedJob> dropped;
  FormedBatch batch = queues.Take(*key, kT0, &dropped);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(batch.batch.jobs.size(), 2u);
  EXPECT_TRUE(batch.batch.stacked);
  EXPECT_EQ(batch.batch.problem.m, 1 + 2);
  EXPECT_EQ(batch.batch.kernel, nullptr);  // chosen on the lane
  EXPECT_EQ(queues.jobs(), 1u);
  FormedBatch rest = queues.Take(*key, kT0, &dropped);
  ASSERT_EQ(rest.batch.jobs.size(), 1u);
  EXPECT_FALSE(rest.batch.stacked);  // a stack of one runs as itself
  EXPECT_EQ(rest.batch.problem.m, 4);
  EXPECT_EQ(queues.jobs(), 0u);
  EXPECT_EQ(queues.bytes(), 0);
}

TEST(BatchQueuesTest, AJobThatMustRunAloneGoesAloneAndTakeAllEmptiesEveryQueue) {
  BatchQueues queues(Options(8, absl::Seconds(1)));
  std::unique_ptr<Job> broadcast = JobOf(2);
  broadcast->problem.batch = 2;
  broadcast->problem.batch_stride_b = 0;  // B broadcast: runs alone
  EXPECT_TRUE(queues.Push(std::move(broadcast), 10, kT0));
  EXPECT_TRUE(queues.Push(JobOf(5), 10, kT0));
  absl::Time due;
  const BatchKey* key = queues.NextReady(kT0, false, &due);  // ready at once
  ASSERT_NE(key, nullptr);
  std::vector<DroppedJob> dropped;
  EXPECT_EQ(queues.Take(*key, kT0, &dropped).batch.jobs.size(), 1u);
  queues.TakeAll(absl::UnavailableError("gone"), &dropped);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].status, absl::UnavailableError("gone"));
  EXPECT_EQ(queues.jobs(), 0u);
  EXPECT_EQ(queues.NextReady(kT0, true, &due), nullptr);
}

}  // namespace
}  // namespace gemmd
