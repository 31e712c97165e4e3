// LaunchRunner on its own: the last look, the launch, the result it reports, the answers.
#include "server/scheduling/launch_runner.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "tests/fake_device.h"

namespace gemmd {
namespace {

using ::gemmd::testing::FakeDevice;

struct Answer {
  absl::Status status;
  JobResult result;
  int calls = 0;
};

std::unique_ptr<Job> JobOf(int64_t m, std::vector<float>* c, Answer* answer) {
  auto job = std::make_unique<Job>();
  job->kernel = &testing::TheFakeKernel();
  job->problem.m = m;
  job->problem.n = 2;
  job->problem.k = 1;
  c->assign(static_cast<size_t>(m * 2), -1.0f);
  job->operands.c_out = c->data();
  job->accepted = absl::Now();
  job->done = [answer](const absl::Status& status, const JobResult& result) {
    answer->status = status;
    answer->result = result;
    ++answer->calls;
  };
  return job;
}

TEST(LaunchRunnerTest, RunsTheJobsStillWantedAndAnswersEachOnce) {
  FakeDevice device;
  ServerMetrics metrics(1);
  LaunchRunner runner(nullptr, &metrics, Clock::Real(), 1);
  std::vector<float> c1, c2, c3;
  Answer a1, a2, a3;
  Batch batch;
  batch.jobs.push_back(JobOf(3, &c1, &a1));
  std::unique_ptr<Job> late = JobOf(3, &c2, &a2);
  late->deadline = absl::Now() - absl::Seconds(1);
  batch.jobs.push_back(std::move(late));
  batch.jobs.push_back(JobOf(3, &c3, &a3));
  batch.problem = PackedProblem(batch.jobs);
  batch.kernel = &testing::TheFakeKernel();
  std::vector<LaunchRunner::Ran> ran = runner.Run(&device, 0, 0, std::move(batch));
  EXPECT_EQ(a2.calls, 1);  // answered at the last look, never launched
  EXPECT_EQ(a2.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a1.calls, 0);  // the rest wait for Answer
  ASSERT_EQ(ran.size(), 1u);
  EXPECT_TRUE(LaunchRunner::FirstFailure(ran).ok());
  EXPECT_EQ(device.batch_sizes(), std::vector<int>{2});
  EXPECT_EQ(device.packed_batch(), std::vector<int64_t>{2});  // the launch lost the late job
  runner.Answer(std::move(ran));
  runner.AwaitIdle();
  for (const Answer* a : {&a1, &a3}) {
    EXPECT_EQ(a->calls, 1);
    EXPECT_TRUE(a->status.ok()) << a->status;
    EXPECT_EQ(a->result.kernel, &testing::TheFakeKernel());
    EXPECT_EQ(a->result.device, "fake:0");
    EXPECT_EQ(a->result.batch_size, 2u);
    EXPECT_EQ(a->result.compute, absl::Milliseconds(1));
  }
  EXPECT_EQ(c1, std::vector<float>(6, 3.0f));
}

TEST(LaunchRunnerTest, AfterAFailedLaunchTheRestOfTheBatchFailsWithoutRunning) {
  FakeDevice device;
  device.FailWith(absl::InternalError("fake:0 faulted"), /*fault=*/true);
  testing::FakeCatalogue catalogue;
  catalogue.set_refuse_rows(2);  // no kernel for the stack: its jobs go one by one
  LaunchRunner runner(&catalogue, nullptr, Clock::Real(), 1);
  float b = 0;
  std::vector<float> c[3];
  Answer answers[3];
  Batch batch;
  for (int i = 0; i < 3; ++i) {
    batch.jobs.push_back(JobOf(1, &c[i], &answers[i]));
    batch.jobs.back()->shared_b = &b;
  }
  batch.stacked = true;
  batch.problem = StackedProblem(batch.jobs);
  std::vector<LaunchRunner::Ran> ran = runner.Run(&device, 0, 0, std::move(batch));
  ASSERT_EQ(ran.size(), 3u);
  EXPECT_EQ(device.started(), 1);  // the first failed; the device ran nothing more
  EXPECT_EQ(LaunchRunner::FirstFailure(ran), absl::InternalError("fake:0 faulted"));
  runner.Answer(std::move(ran));
  for (const Answer& a : answers) {
    EXPECT_EQ(a.calls, 1);
    EXPECT_EQ(a.status, absl::InternalError("fake:0 faulted"));
  }
}

}  // namespace
}  // namespace gemmd
