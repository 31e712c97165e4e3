// PartWorkers: a call's parts run at once, on workers kept between calls.
#include "client/part_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gemmd {
namespace {

// Every body waits (10 s at most) until all n have begun: only parts that run at once
// all get past it.
bool AllAtOnce(PartWorkers& workers, int n) {
  absl::Mutex mu;
  int arrived = 0;
  int met = 0;
  workers.Run(n, [&](int) {
    absl::MutexLock lock(&mu);
    ++arrived;
    const auto all = [&arrived, n] { return arrived >= n; };
    if (mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(10))) ++met;
  });
  return met == n;
}

TEST(PartWorkersTest, EveryPartRunsOnceAndAtOnce) {
  PartWorkers workers;
  std::vector<std::atomic<int>> ran(16);
  workers.Run(16, [&](int i) { ran[static_cast<size_t>(i)].fetch_add(1); });
  for (size_t i = 0; i < ran.size(); ++i) EXPECT_EQ(ran[i].load(), 1) << "part " << i;
  EXPECT_TRUE(AllAtOnce(workers, 16));
}

TEST(PartWorkersTest, WorkersAreKeptBetweenRuns) {
  PartWorkers workers;
  workers.Run(8, [](int) {});
  EXPECT_EQ(workers.threads(), 7);  // part 0 runs on the caller's thread
  for (int round = 0; round < 20; ++round) workers.Run(8, [](int) {});
  EXPECT_EQ(workers.threads(), 7);
  workers.Run(1, [](int) {});
  EXPECT_EQ(workers.threads(), 7);
  workers.Run(0, [](int) { ADD_FAILURE() << "no part to run"; });
}

TEST(PartWorkersTest, RunsFromSeveralThreadsNeverWaitForEachOther) {
  // Two calls' parts at once, each needing all its own parts to run together: with too
  // few workers one call's parts would wait behind the other's, and neither finish.
  PartWorkers workers;
  workers.Run(4, [](int) {});  // three parked workers, fewer than the two calls need
  std::atomic<bool> first{false}, second{false};
  std::thread other([&] { first = AllAtOnce(workers, 6); });
  second = AllAtOnce(workers, 6);
  other.join();
  EXPECT_TRUE(first.load());
  EXPECT_TRUE(second.load());
  // Five workers at least (each call's parts but its first at once); ten when the two
  // calls overlapped.
  EXPECT_GE(workers.threads(), 5);
  EXPECT_LE(workers.threads(), 10);
}

}  // namespace
}  // namespace gemmd
