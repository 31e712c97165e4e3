#include "server/scheduling/launch_runner.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/observability/log.h"

namespace gemmd {

LaunchRunner::LaunchRunner(const KernelCatalogue* catalogue, ServerMetrics* metrics, Clock* clock,
                           int completion_threads)
    : catalogue_(catalogue),
      metrics_(metrics),
      clock_(clock),
      completions_(completion_threads, "gemmd-answer") {}

std::vector<LaunchRunner::Ran> LaunchRunner::Run(Device* device, int device_index, int lane,
                                                 Batch batch) {
  const absl::Time started = absl::Now();
  std::vector<DroppedJob> dropped;
  const absl::Time now = clock_->Now();
  std::vector<std::unique_ptr<Job>> keep;
  for (std::unique_ptr<Job>& job : batch.jobs) {
    absl::Status reason = DropReason(*job, now);
    if (reason.ok()) {
      keep.push_back(std::move(job));
    } else {
      dropped.push_back({std::move(job), std::move(reason)});
    }
  }
  batch.jobs = std::move(keep);
  AnswerDropped(std::move(dropped));

  std::vector<Ran> ran;
  absl::Status status = absl::OkStatus();
  for (Batch& launch : ReadyToLaunch(std::move(batch), catalogue_)) {
    if (status.ok()) {
      ran.push_back(Launch(device, device_index, lane, std::move(launch), started));
      status = ran.back().status;
    } else {
      ran.push_back({std::move(launch.jobs), status, JobResult(), started});
    }
  }
  return ran;
}

LaunchRunner::Ran LaunchRunner::Launch(Device* device, int device_index, int lane, Batch batch,
                                       absl::Time started) {
  const double flops = batch.problem.Flops();
  LaunchTimes times;
  const absl::Status status = device->Run(LaunchOf(batch), lane, &times);
  if (metrics_ != nullptr) {
    metrics_->ObserveBatch(static_cast<int64_t>(batch.jobs.size()));
    metrics_->AddDeviceWork(device_index, batch.problem.precision, status.ok() ? flops : 0.0,
                            absl::Now() - started);
    const DeviceMemoryUsage usage = device->memory();
    metrics_->SetDeviceMemory(device_index, usage.device_pool_bytes, usage.device_limit_bytes,
                              usage.pinned_bytes);
  }
  if (!status.ok()) {
    Log(LogLevel::kWarning, "batch_failed",
        {{"device", device->description().name},
         {"kernel", std::string(batch.kernel->name())},
         {"jobs", absl::StrCat(batch.jobs.size())},
         {"code", absl::StatusCodeToString(status.code())},
         {"message", std::string(status.message())}});
  }
  JobResult result;
  result.device = device->description().name;
  result.kernel = batch.kernel;
  result.copy_in = times.copy_in;
  result.compute = times.compute;
  result.copy_out = times.copy_out;
  result.batch_size = static_cast<uint32_t>(batch.jobs.size());
  return {std::move(batch.jobs), status, result, started};
}

void LaunchRunner::Answer(std::vector<Ran> ran) {
  constexpr size_t kJobsPerCompletion = 8;
  for (Ran& r : ran) {
    auto jobs = std::make_shared<std::vector<std::unique_ptr<Job>>>(std::move(r.jobs));
    auto answer = [jobs, status = r.status, result = r.result, started = r.started](
                      size_t first, size_t last) {
      for (size_t j = first; j < last; ++j) {
        JobResult mine = result;
        mine.queue = started - (*jobs)[j]->accepted;
        (*jobs)[j]->done(status, mine);
      }
    };
    if (jobs->size() <= kJobsPerCompletion) {
      answer(0, jobs->size());
      continue;
    }
    // The first slice is the lane's own: one thread fewer to wake, and it starts at once.
    for (size_t first = kJobsPerCompletion; first < jobs->size(); first += kJobsPerCompletion) {
      const size_t last = std::min(jobs->size(), first + kJobsPerCompletion);
      completions_.Schedule([answer, first, last] { answer(first, last); });
    }
    answer(0, kJobsPerCompletion);
  }
}

absl::Status LaunchRunner::FirstFailure(const std::vector<Ran>& ran) {
  for (const Ran& r : ran) {
    if (!r.status.ok()) return r.status;
  }
  return absl::OkStatus();
}

}  // namespace gemmd
