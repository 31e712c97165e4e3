#include "server/fifo_executor.h"

#include <gtest/gtest.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/fake_device.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;

// One job's outcome, filled by its completion callback.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  JobResult result;
  std::atomic<int> calls{0};
  std::vector<float> c;
};

std::unique_ptr<Job> MakeJob(Outcome* out, int64_t m, int64_t n = 2) {
  auto job = std::make_unique<Job>();
  job->problem.m = m;
  job->problem.n = n;
  job->problem.k = 1;
  out->c.assign(static_cast<size_t>(m * n), -1.0f);
  job->operands.c_out = out->c.data();
  job->kernel = "fake_kernel";
  job->accepted = absl::Now();
  job->done = [out](const absl::Status& status, const JobResult& result) {
    out->status = status;
    out->result = result;
    out->calls.fetch_add(1);
    out->done.Notify();
  };
  return job;
}

double MetricValue(ServerMetrics& metrics, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      bool match = true;
      for (const auto& [key, value] : labels) {
        bool found = false;
        for (const prometheus::ClientMetric::Label& l : metric.label) {
          found = found || (l.name == key && l.value == value);
        }
        match = match && found;
      }
      if (!match) continue;
      if (family.type == prometheus::MetricType::Counter) return metric.counter.value;
      if (family.type == prometheus::MetricType::Gauge) return metric.gauge.value;
      if (family.type == prometheus::MetricType::Histogram) {
        return static_cast<double>(metric.histogram.sample_count);
      }
    }
  }
  return -1;
}

TEST(FifoExecutorTest, FullQueueRejectsAtOnce) {
  FakeDevice device(/*gated=*/true);
  ServerMetrics metrics(1);
  FifoExecutor executor({&device}, {/*max_queue_size=*/2}, &metrics);
  Outcome o1, o2, o3, o4;
  ASSERT_TRUE(executor.Submit(MakeJob(&o1, 1)).ok());
  device.AwaitStarted(1);  // job 1 is on the device, the queue is empty
  ASSERT_TRUE(executor.Submit(MakeJob(&o2, 2)).ok());
  ASSERT_TRUE(executor.Submit(MakeJob(&o3, 3)).ok());
  EXPECT_EQ(executor.QueueDepth(), 2u);
  EXPECT_EQ(MetricValue(metrics, "gemm_queue_depth", {}), 2);
  const absl::Status full = executor.Submit(MakeJob(&o4, 4));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(), "queue full: 2 jobs waiting (--max_queue_size=2); retry later");
  device.Open();
  executor.Drain();
  for (Outcome* o : {&o1, &o2, &o3}) {
    EXPECT_TRUE(o->done.HasBeenNotified());
    EXPECT_TRUE(o->status.ok()) << o->status;
    EXPECT_EQ(o->calls.load(), 1);
  }
  EXPECT_EQ(o4.calls.load(), 0);  // a rejected job is never answered by the executor
  EXPECT_EQ(device.ran_m(), (std::vector<int64_t>{1, 2, 3}));  // FIFO
  EXPECT_EQ(MetricValue(metrics, "gemm_queue_depth", {}), 0);
  EXPECT_EQ(MetricValue(metrics, "gemm_batch_size", {}), 3);
  EXPECT_EQ(MetricValue(metrics, "gemm_flops_total", {{"device", "0"}, {"precision", "FP32"}}),
            2.0 * (1 + 2 + 3) * 2);
}

TEST(FifoExecutorTest, ExpiredAndCancelledJobsNeverReachTheDevice) {
  FakeDevice device(/*gated=*/true);
  FifoExecutor executor({&device}, {8}, nullptr);
  Outcome running, expired, cancelled, fine;
  ASSERT_TRUE(executor.Submit(MakeJob(&running, 1)).ok());
  device.AwaitStarted(1);
  auto job = MakeJob(&expired, 2);
  job->deadline = absl::Now() - absl::Milliseconds(1);
  ASSERT_TRUE(executor.Submit(std::move(job)).ok());
  job = MakeJob(&cancelled, 3);
  job->is_cancelled = [] { return true; };
  ASSERT_TRUE(executor.Submit(std::move(job)).ok());
  job = MakeJob(&fine, 4);
  job->deadline = absl::Now() + absl::Hours(1);
  job->is_cancelled = [] { return false; };
  ASSERT_TRUE(executor.Submit(std::move(job)).ok());
  device.Open();
  executor.Drain();
  EXPECT_EQ(expired.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(expired.status.message(), "in the queue; the job did not run"))
      << expired.status;
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cancelled.status.message(), "the client cancelled the request before it ran");
  EXPECT_TRUE(fine.status.ok());
  EXPECT_EQ(device.ran_m(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(expired.c[0], -1.0f);  // untouched
}

TEST(FifoExecutorTest, DeviceErrorsReachTheCaller) {
  FakeDevice device;
  device.FailWith(absl::InternalError("injected fault"));
  FifoExecutor executor({&device}, {8}, nullptr);
  Outcome o;
  ASSERT_TRUE(executor.Submit(MakeJob(&o, 5)).ok());
  o.done.WaitForNotification();
  EXPECT_EQ(o.status, absl::InternalError("injected fault"));
}

TEST(FifoExecutorTest, DrainFinishesAcceptedJobsAndRefusesNewOnes) {
  FakeDevice device(/*gated=*/true);
  FifoExecutor executor({&device}, {1000}, nullptr);
  std::vector<std::unique_ptr<Outcome>> accepted;
  for (int i = 0; i < 3; ++i) {
    accepted.push_back(std::make_unique<Outcome>());
    ASSERT_TRUE(executor.Submit(MakeJob(accepted.back().get(), 1 + i)).ok());
  }
  device.AwaitStarted(1);
  std::thread drain([&] { executor.Drain(); });
  while (!executor.draining()) absl::SleepFor(absl::Microseconds(100));
  Outcome refused;
  const absl::Status status = executor.Submit(MakeJob(&refused, 100));
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

TEST(FifoExecutorTest, ResultsReachTheirCallersUnderConcurrency) {
  FakeDevice d0, d1;
  FifoExecutor executor({&d0, &d1}, {100000}, nullptr);
  constexpr int kThreads = 8, kJobsPerThread = 200;
  std::vector<std::unique_ptr<Outcome>> outcomes(kThreads * kJobsPerThread);
  std::vector<int64_t> ms(outcomes.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int j = 0; j < kJobsPerThread; ++j) {
        const size_t i = static_cast<size_t>(t * kJobsPerThread + j);
        outcomes[i] = std::make_unique<Outcome>();
        ms[i] = 1 + static_cast<int64_t>(rng() % 64);  // the value the device writes
        ASSERT_TRUE(executor.Submit(MakeJob(outcomes[i].get(), ms[i], 1 + rng() % 5)).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  executor.Drain();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_EQ(outcomes[i]->calls.load(), 1);
    ASSERT_TRUE(outcomes[i]->status.ok());
    for (float v : outcomes[i]->c) ASSERT_EQ(v, static_cast<float>(ms[i])) << "job " << i;
  }
  EXPECT_EQ(d0.started() + d1.started(), kThreads * kJobsPerThread);
  EXPECT_GT(d0.started(), 0);  // both devices took work
  EXPECT_GT(d1.started(), 0);
}

}  // namespace
}  // namespace gemmd
