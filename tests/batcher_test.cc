#include "server/scheduling/batcher.h"

#include <gtest/gtest.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_quantized_gemm.h"
#include "tests/fake_device.h"
#include "tests/metrics_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;
using ::gemmd::testing::MetricValue;

// One job's outcome, filled by its completion callback.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  JobResult result;
  std::atomic<int> calls{0};
  std::vector<float> c;
  float tag = 0;  // what the fake device copies into C when set as A
};

// Makes the fake device write `tag` into the job's C (it copies A's first float).
std::unique_ptr<Job> Tagged(std::unique_ptr<Job> job, Outcome* out, float tag) {
  out->tag = tag;
  job->operands.a = &out->tag;
  return job;
}

class FakeClock : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1000000);
};

// Polls `condition` for up to 10 s (a failing test must not hang the suite).
template <typename F>
bool Eventually(F condition) {
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (!condition()) {
    if (absl::Now() > limit) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

// Submit with the job handed over (a refused one is dropped here).
absl::Status SubmitJob(Batcher& batcher, std::unique_ptr<Job> job) { return batcher.Submit(&job); }

Batcher::Options Opts(uint32_t max_batch_size, absl::Duration delay, size_t max_queue_size) {
  Batcher::Options o;
  o.max_batch_size = max_batch_size;
  o.max_queue_delay = delay;
  o.max_queue_size = max_queue_size;
  return o;
}

// A job of shape m x n x 1; the fake device writes `tag` (default: m) into its C.
std::unique_ptr<Job> MakeJob(Outcome* out, int64_t m, int64_t n = 2, int64_t batch = 1) {
  auto job = std::make_unique<Job>();
  job->kernel = &testing::TheFakeKernel();
  job->problem.batch = batch;
  job->problem.m = m;
  job->problem.n = n;
  job->problem.k = 1;
  out->c.assign(static_cast<size_t>(batch * m * n), -1.0f);
  job->operands.c_out = out->c.data();
  job->accepted = absl::Now();
  job->done = [out](const absl::Status& status, const JobResult& result) {
    out->status = status;
    out->result = result;
    out->calls.fetch_add(1);
    out->done.Notify();
  };
  return job;
}

TEST(BatchTest, PackedProblemAndLayoutConcatenateJobsInOrder) {
  std::vector<std::unique_ptr<Job>> jobs;
  Outcome o[3];
  for (int i = 0; i < 3; ++i) {
    jobs.push_back(MakeJob(&o[i], 4, 3, /*batch=*/i + 1));
    jobs.back()->problem.k = 5;
  }
  const GemmProblem packed = PackedProblem(jobs);
  EXPECT_EQ(packed.batch, 6);
  EXPECT_EQ(packed.StrideA(), 4 * 5);
  Batch batch{packed, std::move(jobs)};
  const DeviceLaunch launch = LaunchOf(batch);
  EXPECT_EQ(launch.problem.batch, 6);
  ASSERT_EQ(launch.items.size(), 3u);
  const LaunchLayout layout = LayoutOf(launch.items);
  EXPECT_EQ(layout.a_offset, (std::vector<int64_t>{0, 80, 240}));  // 4*5 floats per item
  EXPECT_EQ(layout.b_offset, (std::vector<int64_t>{0, 60, 180}));
  EXPECT_EQ(layout.c_offset, (std::vector<int64_t>{0, 48, 144}));
  EXPECT_EQ(layout.a_bytes, 6 * 80);
  EXPECT_EQ(layout.c_in_bytes, 0);  // beta == 0: C_in is never read
  EXPECT_EQ(OperandBytes(batch.jobs[1]->problem), 2 * (80 + 60 + 48));
}

TEST(BatchTest, PackedQuantizedJobsRunAlone) {
  Job dense, packed;
  dense.problem.m = packed.problem.m = 4;
  const QuantizedOperands operands;
  packed.quantized = &operands;
  EXPECT_TRUE(IsBatchable(dense));
  EXPECT_FALSE(IsBatchable(packed));
}

TEST(BatchTest, KeysSeparateWhatOneLaunchCannotServe) {
  Outcome o;
  auto a = MakeJob(&o, 4);
  auto b = MakeJob(&o, 4);
  EXPECT_EQ(BatchKeyOf(*a), BatchKeyOf(*b));
  b->problem.beta = 0.5f;
  EXPECT_FALSE(BatchKeyOf(*a) == BatchKeyOf(*b));
  b = MakeJob(&o, 4);
  static const testing::FakeKernel other_kernel;
  b->kernel = &other_kernel;
  EXPECT_FALSE(BatchKeyOf(*a) == BatchKeyOf(*b));
  b = MakeJob(&o, 4);
  b->problem.transpose_b = true;
  EXPECT_FALSE(BatchKeyOf(*a) == BatchKeyOf(*b));
  b = MakeJob(&o, 4, 2, /*batch=*/3);
  EXPECT_EQ(BatchKeyOf(*a), BatchKeyOf(*b));  // batch counts add up
  EXPECT_TRUE(IsBatchable(b->problem));
  b->problem.batch_stride_b = 0;  // broadcast B: runs alone
  EXPECT_FALSE(IsBatchable(b->problem));
}

TEST(BatcherTest, FullQueueRejectsAtOnce) {
  FakeDevice device(/*gated=*/true);
  ServerMetrics metrics(1);
  Batcher batcher({&device}, Opts(1, absl::ZeroDuration(), 2), &metrics);
  Outcome o1, o2, o3, o4;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o1, 1)).ok());
  device.AwaitStarted(1);  // job 1 is on the device, the queue is empty
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o2, 2)).ok());
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o3, 3)).ok());
  EXPECT_EQ(batcher.QueueDepth(), 2u);
  EXPECT_EQ(MetricValue(metrics, "gemm_queue_depth", {}), 2);
  std::unique_ptr<Job> refused = MakeJob(&o4, 4);
  const Job* const refused_job = refused.get();
  const absl::Status full = batcher.Submit(&refused);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "queue full: 2 jobs waiting (--max_queue_size=2); retry later");
  EXPECT_EQ(refused.get(), refused_job);  // not taken: still the caller's, whole
  device.Open();
  batcher.Drain();
  for (Outcome* o : {&o1, &o2, &o3}) {
    EXPECT_TRUE(o->done.HasBeenNotified());
    EXPECT_TRUE(o->status.ok()) << o->status;
    EXPECT_EQ(o->calls.load(), 1);
    EXPECT_EQ(o->result.batch_size, 1u);
  }
  EXPECT_EQ(o4.calls.load(), 0);  // a rejected job is never answered by the batcher
  EXPECT_EQ(device.ran_m(), (std::vector<int64_t>{1, 2, 3}));  // oldest first
  EXPECT_EQ(MetricValue(metrics, "gemm_queue_depth", {}), 0);
  EXPECT_EQ(MetricValue(metrics, "gemm_batch_size", {}), 3);
  EXPECT_EQ(MetricValue(metrics, "gemm_flops_total", {{"device", "0"}, {"precision", "FP32"}}),
            2.0 * (1 + 2 + 3) * 2);
  EXPECT_EQ(batcher.InflightBytes(), 0);
}

// CheckRoom answers what Submit would about the queue, and also bounds the calls still
// arriving (as many as the queue holds).
TEST(BatcherTest, CheckRoomAnswersWhatSubmitWould) {
  FakeDevice device(/*gated=*/true);
  Batcher batcher({&device}, Opts(1, absl::ZeroDuration(), 2), nullptr);
  Outcome o1, o2, o3;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o1, 1)).ok());
  device.AwaitStarted(1);
  EXPECT_TRUE(batcher.CheckRoom(0).ok());
  EXPECT_TRUE(batcher.CheckRoom(1).ok());
  const absl::Status crowd = batcher.CheckRoom(2);
  EXPECT_EQ(crowd.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(crowd.message(),
            "server busy: 2 calls are still sending their requests (--max_queue_size=2); "
            "retry later");
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o2, 2)).ok());
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o3, 3)).ok());  // the queue (size 2) is now full
  const absl::Status full = batcher.CheckRoom(0);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  Outcome o4;
  EXPECT_EQ(SubmitJob(batcher, MakeJob(&o4, 4)).message(), full.message());
  EXPECT_EQ(full.message(), "queue full: 2 jobs waiting (--max_queue_size=2); retry later");
  EXPECT_EQ(batcher.QueueDepth(), 2u);  // checking took nothing
  device.Open();
  batcher.Drain();
  EXPECT_EQ(batcher.CheckRoom(0).code(), absl::StatusCode::kUnavailable);
}

// With the service's arriving count: a lone job on an idle device goes at once (the
// clock stands still, far from max_queue_delay); while another request is on its way,
// or with wait_when_idle, it waits for company as before.
TEST(BatcherTest, AnIdleDeviceTakesALoneJobAtOnceUnlessMoreAreArriving) {
  FakeClock clock;
  FakeDevice device;
  std::atomic<int64_t> arriving{0};
  Batcher batcher({&device}, Opts(4, absl::Seconds(10), 100), nullptr, &clock);
  batcher.SetArriving(&arriving);
  Outcome first;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&first, 3)).ok());
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(first.result.batch_size, 1u);

  arriving = 1;  // one more caller is sending its request: keep the window open
  Outcome second, third;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&second, 3)).ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(second.calls.load(), 0) << "launched while another request was arriving";
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&third, 3)).ok());  // it arrived
  arriving = 0;
  batcher.Poke();
  ASSERT_TRUE(third.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(second.result.batch_size, 2u);  // the two shared a launch
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{1, 2}));

  Batcher::Options fixed = Opts(4, absl::Seconds(10), 100);
  fixed.wait_when_idle = true;
  FakeDevice other;
  Batcher waiting({&other}, fixed, nullptr, &clock);
  waiting.SetArriving(&arriving);
  Outcome lone;
  ASSERT_TRUE(SubmitJob(waiting, MakeJob(&lone, 3)).ok());
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(lone.calls.load(), 0) << "wait_when_idle: the lone job must wait the delay";
  waiting.Drain();
  EXPECT_EQ(lone.calls.load(), 1);
}

TEST(BatcherTest, BatchesFormUpToTheSizeLimitAndTheDelayBoundHolds) {
  FakeClock clock;
  FakeDevice device(/*gated=*/true);
  device.set_tag_from_a(true);
  ServerMetrics metrics(1);
  Batcher batcher({&device}, Opts(4, absl::Milliseconds(1), 100), &metrics, &clock);
  std::vector<std::unique_ptr<Outcome>> outcomes;
  for (int i = 0; i < 10; ++i) {
    outcomes.push_back(std::make_unique<Outcome>());
    ASSERT_TRUE(
        SubmitJob(batcher, Tagged(MakeJob(outcomes.back().get(), 3), outcomes.back().get(), i)).ok());
  }
  device.AwaitStarted(1);  // a full batch goes at once, without waiting for the delay
  device.Open();
  // The second full batch follows; the last two wait for company: the clock stands still.
  ASSERT_TRUE(Eventually([&] { return device.started() == 2; }));
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{4, 4}));
  clock.Advance(absl::Microseconds(999));
  batcher.Poke();
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(device.started(), 2) << "launched before the head waited max_queue_delay";
  clock.Advance(absl::Microseconds(1));
  batcher.Poke();
  ASSERT_TRUE(Eventually([&] { return device.started() == 3; }));
  batcher.Drain();
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{4, 4, 2}));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(outcomes[i]->status.ok());
    EXPECT_EQ(outcomes[i]->result.batch_size, i < 8 ? 4u : 2u);
    EXPECT_EQ(outcomes[i]->c, std::vector<float>(6, static_cast<float>(i)));
  }
  EXPECT_EQ(MetricValue(metrics, "gemm_batch_size", {}), 3);
}

TEST(BatcherTest, MaxBatchSizeOneTurnsBatchingOff) {
  FakeDevice device(/*gated=*/true);
  Batcher batcher({&device}, Opts(1, absl::Milliseconds(100), 100), nullptr);
  Outcome o[6];
  for (Outcome& out : o) ASSERT_TRUE(SubmitJob(batcher, MakeJob(&out, 2)).ok());
  device.Open();
  batcher.Drain();
  EXPECT_EQ(device.batch_sizes(), std::vector<int>(6, 1));
}

TEST(BatcherTest, OnlyJobsWithOneKeyShareALaunch) {
  FakeClock clock;
  FakeDevice device(/*gated=*/true);
  Batcher batcher({&device}, Opts(8, absl::Milliseconds(1), 100), nullptr, &clock);
  Outcome o[9];
  // m alternates 1, 2, 3; jobs 6..8 have batch 2 (they still join m's batch), and the
  // last one broadcasts B, so it must run alone.
  for (int i = 0; i < 9; ++i) {
    auto job = MakeJob(&o[i], 1 + i % 3, 2, i >= 6 ? 2 : 1);
    if (i == 8) job->problem.batch_stride_b = 0;
    ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  }
  clock.Advance(absl::Milliseconds(1));
  batcher.Poke();
  device.Open();
  batcher.Drain();
  // Oldest head first: m=1 (jobs 0,3,6), m=2 (1,4,7), m=3 (2,5), then job 8 alone.
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{3, 3, 2, 1}));
  EXPECT_EQ(device.ran_m(), (std::vector<int64_t>{1, 1, 1, 2, 2, 2, 3, 3, 3}));
  EXPECT_EQ(device.packed_batch(), (std::vector<int64_t>{4, 4, 2, 2}));
  for (const Outcome& out : o) EXPECT_TRUE(out.status.ok()) << out.status;
}

// A job of M = 2 against the resident B at `b` (it may stack with others against it).
std::unique_ptr<Job> AgainstResidentB(Outcome* out, const float* b) {
  std::unique_ptr<Job> job = MakeJob(out, 2);
  job->shared_b = b;
  return job;
}

// A stack of jobs against one resident B launches on the kernel chosen for the stack's M
// (off the batcher's lock), which here is not the one each job got alone; every job's
// result names the kernel that ran, not the one chosen at admission.
TEST(BatcherTest, AStackRunsOnTheKernelChosenForItsRowsAndEachResultSaysSo) {
  FakeDevice device(/*gated=*/true);
  testing::FakeCatalogue catalogue;
  catalogue.set_tall_rows(4);
  Batcher::Options options = Opts(3, absl::Milliseconds(1), 100);
  options.catalogue = &catalogue;
  Batcher batcher({&device}, options, nullptr);
  Outcome lone, stacked[3];
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&lone, 2)).ok());
  device.AwaitStarted(1);  // holds the device, so the three below wait together
  float resident_b[2] = {1, 1};
  for (Outcome& out : stacked) {
    std::unique_ptr<Job> job = AgainstResidentB(&out, resident_b);
    ASSERT_EQ(job->kernel, &testing::TheFakeKernel());  // what admission chose for M = 2
    ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  }
  device.Open();
  batcher.Drain();
  EXPECT_EQ(device.kernels(), (std::vector<std::string>{"fake_kernel", "fake_tall_kernel"}));
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{1, 3}));
  ASSERT_TRUE(lone.status.ok()) << lone.status;
  EXPECT_EQ(lone.result.kernel, &testing::TheFakeKernel());
  for (const Outcome& out : stacked) {
    ASSERT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.result.kernel, &testing::TheTallKernel());
    EXPECT_EQ(out.result.batch_size, 3u);
    EXPECT_EQ(out.c, std::vector<float>(4, 2.0f));  // its own rows: its own M
  }
}

// A stack no kernel runs goes to the device one job at a time, each on the kernel chosen
// for it alone; the jobs forced to one kernel stack on that kernel without asking.
TEST(BatcherTest, AStackNoKernelRunsGoesOneJobAtATimeAndAForcedOneIsKept) {
  FakeDevice device(/*gated=*/true);
  testing::FakeCatalogue catalogue;
  catalogue.set_refuse_rows(4);
  Batcher::Options options = Opts(3, absl::Milliseconds(1), 100);
  options.catalogue = &catalogue;
  Batcher batcher({&device}, options, nullptr);
  Outcome lone, unforced[3], forced[3];
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&lone, 2)).ok());
  device.AwaitStarted(1);
  float resident_b[2] = {1, 1};
  for (Outcome& out : unforced) {
    ASSERT_TRUE(SubmitJob(batcher, AgainstResidentB(&out, resident_b)).ok());
  }
  for (Outcome& out : forced) {
    std::unique_ptr<Job> job = AgainstResidentB(&out, resident_b);
    job->kernel = &testing::TheTallKernel();
    job->kernel_forced = true;
    ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  }
  device.Open();
  batcher.Drain();
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{1, 1, 1, 1, 3}));
  EXPECT_EQ(device.kernels(),
            (std::vector<std::string>{"fake_kernel", "fake_kernel", "fake_kernel", "fake_kernel",
                                      "fake_tall_kernel"}));
  for (const Outcome& out : unforced) {
    ASSERT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.result.kernel, &testing::TheFakeKernel());
    EXPECT_EQ(out.result.batch_size, 1u);
  }
  for (const Outcome& out : forced) {
    ASSERT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.result.kernel, &testing::TheTallKernel());
    EXPECT_EQ(out.result.batch_size, 3u);
  }
}

TEST(BatcherTest, ExpiredAndCancelledJobsNeverReachTheDevice) {
  FakeDevice device(/*gated=*/true);
  Batcher batcher({&device}, Opts(1, absl::ZeroDuration(), 8), nullptr);
  Outcome running, expired, cancelled, fine;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&running, 1)).ok());
  device.AwaitStarted(1);
  auto job = MakeJob(&expired, 2);
  job->deadline = absl::Now() - absl::Milliseconds(1);
  ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  job = MakeJob(&cancelled, 3);
  job->is_cancelled = [] { return true; };
  ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  EXPECT_EQ(batcher.CancelledJobsWaiting(), 1u);
  job = MakeJob(&fine, 4);
  job->deadline = absl::Now() + absl::Hours(1);
  job->is_cancelled = [] { return false; };
  ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  device.Open();
  batcher.Drain();
  EXPECT_EQ(expired.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(expired.status.message(), "in the queue; the job did not run"))
      << expired.status;
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cancelled.status.message(), "the client cancelled the request before it ran");
  EXPECT_TRUE(fine.status.ok());
  EXPECT_EQ(device.ran_m(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(expired.c[0], -1.0f);  // untouched
  EXPECT_EQ(batcher.InflightBytes(), 0);
}

TEST(BatcherTest, DeadlinesFollowTheInjectedClock) {
  FakeClock clock;
  FakeDevice device(/*gated=*/true);
  Batcher batcher({&device}, Opts(4, absl::Milliseconds(5), 8), nullptr, &clock);
  Outcome early, late;
  auto job = MakeJob(&early, 2);
  job->deadline = clock.Now() + absl::Milliseconds(2);  // passes while it waits for company
  ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  job = MakeJob(&late, 2);
  job->deadline = clock.Now() + absl::Milliseconds(10);
  ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  clock.Advance(absl::Milliseconds(5));
  batcher.Poke();
  device.Open();
  batcher.Drain();
  EXPECT_EQ(early.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(late.status.ok()) << late.status;
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{1}));
}

// A packed quantized job holds its wire bytes and its FP32 result, not the FP32 copies
// of its operands: the device's per-launch cap and the in-flight count see those.
TEST(BatcherTest, PackedQuantizedJobsCountTheirPackedBytes) {
  FakeDevice device(/*gated=*/true);
  Outcome o;
  auto job = MakeJob(&o, 4, 8);  // C: 4 x 8 floats = 128 bytes
  job->problem.k = 1024;         // as FP32: (4 + 8) * 1024 * 4 + 128 = 49 280 bytes
  const std::string a(4 * 1024 / 2, '\0'), a_scales(4 * 1024 / 16, '\0');
  const std::string b(8 * 1024 / 2, '\0'), b_scales(8 * 1024 / 16, '\0');
  auto q = std::make_shared<QuantizedOperands>();
  q->m = 4;
  q->n = 8;
  q->k = 1024;
  q->a = QuantizedOperand{QuantFormat::kNvfp4, a, a_scales, 1.0f};
  q->b = QuantizedOperand{QuantFormat::kNvfp4, b, b_scales, 1.0f};
  job->quantized = q.get();
  const int64_t packed = 2048 + 256 + 4096 + 512 + 128;
  EXPECT_EQ(JobBytes(*job), packed);
  EXPECT_EQ(OperandBytes(job->problem), 49280);
  device.set_max_batch_bytes(packed);  // the FP32 copies would not fit a launch
  Batcher batcher({&device}, Opts(1, absl::ZeroDuration(), 100), nullptr);
  ASSERT_TRUE(SubmitJob(batcher, std::move(job)).ok());
  EXPECT_EQ(batcher.InflightBytes(), packed);
  device.Open();
  batcher.Drain();
  EXPECT_EQ(o.calls.load(), 1);
  EXPECT_EQ(batcher.InflightBytes(), 0);

  // Weight-only with FP16 A: its wire bytes; on the CPU backend's weight-only kernel also
  // the FP32 copy of A it makes (the GPU kernels read FP16 A in place).
  Outcome o2;
  auto weight_only = MakeJob(&o2, 4, 8);
  const std::string a16(4 * 1024 * 2, '\0');
  auto q2 = std::make_shared<QuantizedOperands>(*q);
  q2->a.reset();
  q2->a_dense_type = DataType::kFloat16;
  q2->a_dense = a16;
  weight_only->quantized = q2.get();
  weight_only->kernel = &testing::TheFakeKernel();  // no host workspace
  EXPECT_EQ(JobBytes(*weight_only), 8192 + 4096 + 512 + 128);
  weight_only->kernel = FindCpuKernel(kCpuWeightOnlyKernel);
  ASSERT_NE(weight_only->kernel, nullptr);
  EXPECT_EQ(JobBytes(*weight_only), 8192 + 4 * 1024 * 4 + 4096 + 512 + 128);
}


TEST(BatcherTest, DeviceMemoryBoundsBatchesAndRefusesOversizedJobs) {
  FakeClock clock;
  FakeDevice device(/*gated=*/true);
  Outcome probe;
  const int64_t job_bytes = OperandBytes(MakeJob(&probe, 4)->problem);
  device.set_max_batch_bytes(2 * job_bytes);
  Batcher batcher({&device}, Opts(8, absl::Milliseconds(1), 100), nullptr, &clock);
  Outcome big;
  const absl::Status too_big = SubmitJob(batcher, MakeJob(&big, 4, 2, /*batch=*/3));
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(too_big.message(), "--device_memory_limit_bytes")) << too_big;
  Outcome o[5];
  for (Outcome& out : o) ASSERT_TRUE(SubmitJob(batcher, MakeJob(&out, 4)).ok());
  clock.Advance(absl::Milliseconds(1));
  batcher.Poke();
  device.Open();
  batcher.Drain();
  EXPECT_EQ(device.batch_sizes(), (std::vector<int>{2, 2, 1}));
}

TEST(BatcherTest, LeastOutstandingWorkPlacement) {
  FakeDevice d0(/*gated=*/true, /*lanes=*/2, 0), d1(/*gated=*/true, /*lanes=*/2, 1);
  Batcher batcher({&d0, &d1}, Opts(1, absl::ZeroDuration(), 100), nullptr);
  Outcome o[3];
  // 2*64*2 FLOPs lands on d0 (a tie goes to the first); then d1 has less work, twice.
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o[0], 64)).ok());
  d0.AwaitStarted(1);
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o[1], 2)).ok());
  d1.AwaitStarted(1);
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o[2], 3)).ok());
  d1.AwaitStarted(2);
  d0.Open();
  d1.Open();
  batcher.Drain();
  EXPECT_EQ(d0.ran_m(), (std::vector<int64_t>{64}));
  EXPECT_EQ(d1.ran_m(), (std::vector<int64_t>{2, 3}));
}

TEST(BatcherTest, DeviceErrorsReachTheCallerAndADeviceStaysHealthy) {
  FakeDevice device;
  device.FailWith(absl::FailedPreconditionError("no kernel"));
  Batcher batcher({&device}, Opts(8, absl::ZeroDuration(), 8), nullptr);
  Outcome o;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&o, 5)).ok());
  o.done.WaitForNotification();
  EXPECT_EQ(o.status, absl::FailedPreconditionError("no kernel"));
  EXPECT_EQ(batcher.HealthyDevices(), 1);
}

TEST(BatcherTest, AFaultedDeviceGetsNoMoreWork) {
  FakeDevice bad(/*gated=*/false, 1, 0), good(/*gated=*/true, 1, 1);
  bad.FailWith(absl::InternalError("cuda:0 fault: an illegal memory access"), /*fault=*/true);
  ServerMetrics metrics(2);
  Batcher batcher({&bad, &good}, Opts(1, absl::ZeroDuration(), 100), &metrics);
  Outcome first, second;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&first, 7)).ok());  // goes to `bad` (tie, first)
  first.done.WaitForNotification();
  EXPECT_EQ(first.status.code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(Eventually([&] { return batcher.HealthyDevices() == 1; }));
  EXPECT_EQ(MetricValue(metrics, "gemm_device_healthy", {{"device", "0"}}), 0);
  EXPECT_EQ(MetricValue(metrics, "gemm_device_healthy", {{"device", "1"}}), 1);
  std::vector<std::unique_ptr<Outcome>> later;
  for (int i = 0; i < 5; ++i) {
    later.push_back(std::make_unique<Outcome>());
    ASSERT_TRUE(SubmitJob(batcher, MakeJob(later.back().get(), 8)).ok());
  }
  good.Open();
  batcher.Drain();
  for (const auto& o : later) EXPECT_TRUE(o->status.ok()) << o->status;
  EXPECT_EQ(bad.started(), 1);
  EXPECT_EQ(good.started(), 5);
}

TEST(BatcherTest, WithNoHealthyDeviceEverythingGetsUnavailable) {
  FakeDevice device(/*gated=*/true);
  device.FailWith(absl::InternalError("cuda:0 fault"), /*fault=*/true);
  Batcher batcher({&device}, Opts(1, absl::ZeroDuration(), 100), nullptr);
  absl::Notification none_healthy;
  batcher.SetOnNoHealthyDevice([&] { none_healthy.Notify(); });
  Outcome running, queued;
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&running, 1)).ok());
  device.AwaitStarted(1);
  ASSERT_TRUE(SubmitJob(batcher, MakeJob(&queued, 2)).ok());
  device.Open();
  ASSERT_TRUE(none_healthy.WaitForNotificationWithTimeout(absl::Seconds(10)));
  running.done.WaitForNotification();
  queued.done.WaitForNotification();
  EXPECT_EQ(running.status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(queued.status.code(), absl::StatusCode::kUnavailable);
  Outcome refused;
  const absl::Status status = SubmitJob(batcher, MakeJob(&refused, 3));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "no healthy device: every device of this server has faulted");
  batcher.Drain();
  EXPECT_EQ(batcher.InflightBytes(), 0);
}

TEST(BatcherTest, DrainFinishesAcceptedJobsAndRefusesNewOnes) {
  FakeDevice device(/*gated=*/true);
  // A long delay: draining must not wait for it.
  Batcher batcher({&device}, Opts(64, absl::Seconds(1), 1000), nullptr);
  std::vector<std::unique_ptr<Outcome>> accepted;
  for (int i = 0; i < 3; ++i) {
    accepted.push_back(std::make_unique<Outcome>());
    ASSERT_TRUE(SubmitJob(batcher, MakeJob(accepted.back().get(), 1 + i)).ok());
  }
  std::thread drain([&] { batcher.Drain(); });
  while (!batcher.draining()) absl::SleepFor(absl::Microseconds(100));
  Outcome refused;
  const absl::Status status = SubmitJob(batcher, MakeJob(&refused, 100));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "server is shutting down");
  device.Open();
  drain.join();
  for (const auto& o : accepted) {  // queued before the drain: all ran
    EXPECT_EQ(o->calls.load(), 1);
    EXPECT_TRUE(o->status.ok()) << o->status;
  }
  EXPECT_EQ(refused.calls.load(), 0);
  EXPECT_EQ(device.ran_m(), (std::vector<int64_t>{1, 2, 3}));
}

TEST(BatcherTest, ResultsReachTheirCallersUnderConcurrency) {
  FakeDevice d0(false, 2, 0), d1(false, 2, 1);
  d0.set_tag_from_a(true);
  d1.set_tag_from_a(true);
  Batcher batcher({&d0, &d1}, Opts(16, absl::Microseconds(200), 100000), nullptr);
  constexpr int kThreads = 8, kJobsPerThread = 300;
  std::vector<std::unique_ptr<Outcome>> outcomes(kThreads * kJobsPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int j = 0; j < kJobsPerThread; ++j) {
        const size_t i = static_cast<size_t>(t * kJobsPerThread + j);
        outcomes[i] = std::make_unique<Outcome>();
        // Few shapes, so batches form; every job's tag is its own index.
        auto job = MakeJob(outcomes[i].get(), 1 + rng() % 3, 1 + rng() % 3, 1 + rng() % 2);
        ASSERT_TRUE(
            SubmitJob(batcher, Tagged(std::move(job), outcomes[i].get(), static_cast<float>(i)))
                .ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  batcher.Drain();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_EQ(outcomes[i]->calls.load(), 1);
    ASSERT_TRUE(outcomes[i]->status.ok());
    for (float v : outcomes[i]->c) ASSERT_EQ(v, static_cast<float>(i)) << "job " << i;
  }
  int jobs = 0;
  for (FakeDevice* d : {&d0, &d1}) {
    for (int size : d->batch_sizes()) jobs += size;
  }
  EXPECT_EQ(jobs, kThreads * kJobsPerThread);
  EXPECT_EQ(batcher.InflightBytes(), 0);
}

}  // namespace
}  // namespace gemmd
