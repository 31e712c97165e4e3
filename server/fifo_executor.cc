#include "server/fifo_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gemmd {

FifoExecutor::FifoExecutor(std::vector<Device*> devices, Options options, ServerMetrics* metrics)
    : devices_(std::move(devices)), options_(options), metrics_(metrics) {
  for (size_t i = 0; i < devices_.size(); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(static_cast<int>(i)); });
  }
}

FifoExecutor::~FifoExecutor() { Drain(); }

absl::Status FifoExecutor::Submit(std::unique_ptr<Job> job) {
  size_t depth;
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return absl::UnavailableError("server is shutting down");
    if (queue_.size() >= options_.max_queue_size) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "queue full: ", queue_.size(),
          " jobs waiting (--max_queue_size=", options_.max_queue_size, "); retry later"));
    }
    queue_.push_back(std::move(job));
    depth = queue_.size();
  }
  if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<int64_t>(depth));
  return absl::OkStatus();
}

void FifoExecutor::Drain() {
  absl::MutexLock join_lock(&join_mu_);
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

size_t FifoExecutor::QueueDepth() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

bool FifoExecutor::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

size_t FifoExecutor::CancelledJobsWaiting() const {
  absl::MutexLock lock(&mu_);
  size_t cancelled = 0;
  for (const std::unique_ptr<Job>& job : queue_) {
    if (job->is_cancelled && job->is_cancelled()) ++cancelled;
  }
  return cancelled;
}

void FifoExecutor::WorkerLoop(int worker) {
  Device* device = devices_[worker];
  while (true) {
    std::unique_ptr<Job> job;
    size_t depth;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](FifoExecutor* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return !self->queue_.empty() || self->draining_;
          },
          this));
      if (queue_.empty()) return;  // draining and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      depth = queue_.size();
    }
    if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<int64_t>(depth));
    RunJob(device, worker, std::move(job));
  }
}

void FifoExecutor::RunJob(Device* device, int device_index, std::unique_ptr<Job> job) {
  JobResult result;
  result.device = device->description().name;
  const absl::Time start = absl::Now();
  result.queue = start - job->accepted;
  if (start > job->deadline) {
    job->done(absl::DeadlineExceededError(absl::StrCat("deadline passed after ",
                                                       absl::FormatDuration(result.queue),
                                                       " in the queue; the job did not run")),
              result);
    return;
  }
  if (job->is_cancelled && job->is_cancelled()) {
    job->done(absl::CancelledError("the client cancelled the request before it ran"), result);
    return;
  }
  result.kernel = job->kernel;
  RunTiming timing;
  const absl::Status status = device->Run(job->problem, job->operands, job->kernel, &timing);
  const absl::Duration busy = absl::Now() - start;
  result.copy_in = timing.copy_in;
  result.compute = timing.compute;
  result.copy_out = timing.copy_out;
  if (metrics_ != nullptr) {
    metrics_->ObserveBatch(1);
    metrics_->AddDeviceWork(device_index, job->problem.precision,
                            status.ok() ? job->problem.Flops() : 0.0, busy);
  }
  job->done(status, result);
}

}  // namespace gemmd
