#include "server/scheduling/batcher.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/observability/log.h"

namespace gemmd {

void Batcher::PublishMemory(int device_index, const Device& device) {
  const DeviceMemoryUsage usage = device.memory();
  metrics_->SetDeviceMemory(device_index, usage.device_pool_bytes, usage.device_limit_bytes,
                            usage.pinned_bytes);
}

Batcher::Batcher(std::vector<Device*> devices, Options options, ServerMetrics* metrics,
                 Clock* clock)
    : options_(options),
      metrics_(metrics),
      clock_(clock),
      completions_(options.completion_threads) {
  max_batch_bytes_ = std::numeric_limits<int64_t>::max();
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < devices.size(); ++i) {
      DeviceState state;
      state.device = devices[i];
      state.index = static_cast<int>(i);
      state.lanes = std::max(1, devices[i]->lanes());
      state.free_lanes = state.lanes;
      state.healthy = devices[i]->healthy();
      if (state.healthy) ++healthy_devices_;
      max_batch_bytes_ = std::min(max_batch_bytes_, devices[i]->max_batch_bytes());
      devices_.emplace_back(std::move(state));
      if (metrics_ != nullptr) {
        PublishMemory(static_cast<int>(i), *devices[i]);
        metrics_->SetDeviceHealthy(static_cast<int>(i), devices[i]->healthy());
      }
    }
  }
  dispatcher_ = std::thread([this] { DispatchLoop(); });
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int lane = 0; lane < std::max(1, devices[d]->lanes()); ++lane) {
      lanes_.emplace_back([this, d, lane] { LaneLoop(static_cast<int>(d), lane); });
    }
  }
}

Batcher::~Batcher() { Drain(); }

absl::Status Batcher::Submit(std::unique_ptr<Job> job) {
  const int64_t bytes = JobBytes(*job);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Admission(bytes, 0); !s.ok()) return s;
  KeyQueue& queue = queues_[BatchKeyOf(*job)];
  const bool batchable = IsBatchable(*job);
  queue.jobs.push_back({std::move(job), clock_->Now(), next_seq_++, bytes});
  queue.bytes += bytes;
  ++queued_;
  inflight_bytes_ += bytes;
  PublishQueueDepth();
  // Wake the dispatcher only when this job changes what it waits for: a new queue (a new
  // due time), one that is now ready, or an idle device with nothing more arriving. A
  // job joining a queue that is still filling needs no wake-up: the dispatcher already
  // sleeps until that queue's head is due.
  const bool ready_now = queue.jobs.size() == 1 || !batchable ||
                         queue.jobs.size() >= options_.max_batch_size ||
                         queue.bytes >= max_batch_bytes_ || IdleNow();
  if (ready_now) dispatch_cv_.Signal();
  return absl::OkStatus();
}

absl::Status Batcher::CheckRoom(int64_t arriving) const {
  absl::MutexLock lock(&mu_);
  return Admission(0, arriving);
}

absl::Status Batcher::Admission(int64_t bytes, int64_t arriving) const {
  if (draining_) return absl::UnavailableError("server is shutting down");
  if (healthy_devices_ == 0) {
    return absl::UnavailableError("no healthy device: every device of this server has faulted");
  }
  if (bytes > max_batch_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the operands and result take ", bytes, " bytes; a device here takes at most ",
        max_batch_bytes_, " per launch (see --device_memory_limit_bytes)"));
  }
  if (queued_ >= options_.max_queue_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", queued_, " jobs waiting (--max_queue_size=",
                     options_.max_queue_size, "); retry later"));
  }
  // Calls still sending their requests get a place of their own, as many again: enough
  // that a batch drained from the queue is refilled at once, few enough that a crowd of
  // callers is refused at its headers instead of after its uploads.
  if (arriving >= static_cast<int64_t>(options_.max_queue_size)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("server busy: ", arriving, " calls are still sending their requests (",
                     "--max_queue_size=", options_.max_queue_size, "); retry later"));
  }
  return absl::OkStatus();
}

void Batcher::Drain() {
  absl::MutexLock join_lock(&join_mu_);
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    dispatch_cv_.SignalAll();
  }
  if (dispatcher_.joinable()) dispatcher_.join();
  for (std::thread& lane : lanes_) {
    if (lane.joinable()) lane.join();
  }
  completions_.AwaitIdle();  // every job answered
}

void Batcher::SetOnNoHealthyDevice(std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  on_no_healthy_device_ = std::move(callback);
}

void Batcher::SetArriving(const std::atomic<int64_t>* arriving) {
  absl::MutexLock lock(&mu_);
  arriving_ = arriving;
}

void Batcher::Poke() {
  absl::MutexLock lock(&mu_);
  dispatch_cv_.SignalAll();
}

size_t Batcher::QueueDepth() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

int64_t Batcher::InflightBytes() const {
  absl::MutexLock lock(&mu_);
  return inflight_bytes_;
}

int Batcher::HealthyDevices() const {
  absl::MutexLock lock(&mu_);
  return healthy_devices_;
}

bool Batcher::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

size_t Batcher::CancelledJobsWaiting() const {
  absl::MutexLock lock(&mu_);
  size_t cancelled = 0;
  for (const auto& [key, queue] : queues_) {
    for (const Queued& q : queue.jobs) {
      if (q.job->is_cancelled && q.job->is_cancelled()) ++cancelled;
    }
  }
  return cancelled;
}

absl::Status Batcher::DropReason(const Job& job, absl::Time now) const {
  if (now > job.deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "deadline passed after ", absl::FormatDuration(absl::Now() - job.accepted),
        " in the queue; the job did not run"));
  }
  if (job.is_cancelled && job.is_cancelled()) {
    return absl::CancelledError("the client cancelled the request before it ran");
  }
  return absl::OkStatus();
}

bool Batcher::IdleNow() const {
  if (options_.wait_when_idle || arriving_ == nullptr ||
      arriving_->load(std::memory_order_acquire) > 0) {
    return false;
  }
  for (const DeviceState& d : devices_) {
    if (d.healthy && d.free_lanes == d.lanes) return true;
  }
  return false;
}

const BatchKey* Batcher::ReadyKey(absl::Time now, absl::Time* next_ready) const {
  const BatchKey* best = nullptr;
  uint64_t best_seq = 0;
  *next_ready = absl::InfiniteFuture();
  const bool idle = IdleNow();
  for (const auto& [key, queue] : queues_) {
    if (queue.jobs.empty()) continue;
    const Queued& head = queue.jobs.front();
    const absl::Time due = head.enqueued + options_.max_queue_delay;
    const bool ready = draining_ || idle || queue.jobs.size() >= options_.max_batch_size ||
                       queue.bytes >= max_batch_bytes_ || now >= due ||
                       !IsBatchable(*head.job);
    if (!ready) {
      *next_ready = std::min(*next_ready, due);
    } else if (best == nullptr || head.seq < best_seq) {
      best = &key;
      best_seq = head.seq;
    }
  }
  return best;
}

int Batcher::PickDevice(int required) const {
  int best = -1;
  for (const DeviceState& d : devices_) {
    if (!d.healthy || d.free_lanes <= 0 || (required >= 0 && d.index != required)) continue;
    if (best < 0 || d.outstanding_flops < devices_[best].outstanding_flops) best = d.index;
  }
  return best;
}

Batcher::Placed Batcher::FormBatch(const BatchKey& key, KeyQueue& queue, absl::Time now,
                                   std::vector<Dropped>* dropped) {
  std::vector<Queued> taken;
  int64_t bytes = 0, rows = 0;
  const bool quantized_stack = key.stacked && key.quantized;
  while (!queue.jobs.empty() && taken.size() < options_.max_batch_size) {
    Queued& head = queue.jobs.front();
    const bool batchable = IsBatchable(*head.job);
    // A non-batchable job runs alone; the byte cap holds except for a lone job, which
    // Submit already checked.
    if (!taken.empty() &&
        (!batchable || bytes + head.bytes > max_batch_bytes_ ||
         (quantized_stack &&
          rows + StackedRows(*head.job) > options_.max_stacked_quantized_rows))) {
      break;
    }
    Queued q = std::move(head);
    queue.jobs.pop_front();
    queue.bytes -= q.bytes;
    --queued_;
    absl::Status reason = DropReason(*q.job, now);
    if (!reason.ok()) {
      Release(q.bytes);
      dropped->push_back({std::move(q.job), std::move(reason)});
      continue;
    }
    bytes += q.bytes;
    if (key.stacked) rows += StackedRows(*q.job);
    const bool alone = !batchable;
    taken.push_back(std::move(q));
    if (alone) break;
  }
  Placed placed;
  if (taken.empty()) return placed;
  for (Queued& q : taken) {
    placed.flops += q.job->problem.Flops();
    placed.bytes += q.bytes;
    placed.batch.jobs.push_back(std::move(q.job));
  }
  // A stack launches on the kernel chosen for it on the lane (outside this lock), or on
  // the one its jobs forced.
  Batch& batch = placed.batch;
  batch.stacked = key.stacked && batch.jobs.size() > 1;
  if (batch.stacked) {
    batch.problem = StackedProblem(batch.jobs);
    if (key.quantized) batch.stacked_quantized = StackedQuantized(batch.jobs);
    if (batch.jobs.front()->kernel_forced) batch.kernel = batch.jobs.front()->kernel;
  } else {
    batch.problem = PackedProblem(batch.jobs);
  }
  return placed;
}

void Batcher::PlaceOn(int device, Placed placed) {
  DeviceState& d = devices_[device];
  --d.free_lanes;
  d.outstanding_flops += placed.flops;
  d.pending.push_back(std::move(placed));
  lanes_cv_.SignalAll();
}

void Batcher::FailAllQueued(const absl::Status& status, std::vector<Dropped>* dropped) {
  for (auto& [key, queue] : queues_) {
    for (Queued& q : queue.jobs) {
      Release(q.bytes);
      dropped->push_back({std::move(q.job), status});
    }
    queued_ -= queue.jobs.size();
    queue.jobs.clear();
    queue.bytes = 0;
  }
  for (Placed& placed : orphans_) {
    Release(placed.bytes);
    for (std::unique_ptr<Job>& job : placed.batch.jobs) {
      dropped->push_back({std::move(job), status});
    }
  }
  orphans_.clear();
}

void Batcher::Release(int64_t bytes) { inflight_bytes_ -= bytes; }

void Batcher::PublishQueueDepth() {
  if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<int64_t>(queued_));
}

void Batcher::Answer(std::vector<Dropped> dropped) {
  for (Dropped& d : dropped) {
    JobResult result;
    result.queue = absl::Now() - d.job->accepted;
    d.job->done(d.status, result);
  }
}

void Batcher::DispatchLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    std::vector<Dropped> dropped;
    if (healthy_devices_ == 0) {
      FailAllQueued(absl::UnavailableError(
                        "no healthy device: every device of this server has faulted"),
                    &dropped);
      PublishQueueDepth();
    }
    const absl::Time now = clock_->Now();
    absl::Time next_ready = absl::InfiniteFuture();
    const int any_device = PickDevice();
    bool placed_something = false;
    if (!orphans_.empty() && orphans_.front().batch.jobs.front()->device >= 0) {
      // Its jobs' resident tensors are on the device that faulted: nowhere else to run.
      Placed placed = std::move(orphans_.front());
      orphans_.pop_front();
      Release(placed.bytes);
      for (std::unique_ptr<Job>& job : placed.batch.jobs) {
        dropped.push_back({std::move(job), absl::UnavailableError(
                                               "the device holding this request's resident "
                                               "tensors faulted; they are lost")});
      }
      placed_something = true;
    } else if (any_device >= 0 && !orphans_.empty()) {
      Placed placed = std::move(orphans_.front());
      orphans_.pop_front();
      PlaceOn(any_device, std::move(placed));
      placed_something = true;
    } else if (const BatchKey* key = ReadyKey(now, &next_ready); key != nullptr) {
      const bool lost = key->device >= 0 && !devices_[key->device].healthy;
      const int device = key->device >= 0 ? PickDevice(key->device) : any_device;
      if (lost || device >= 0) {
        auto it = queues_.find(*key);
        Placed placed = FormBatch(*key, it->second, now, &dropped);
        if (it->second.jobs.empty()) queues_.erase(it);
        PublishQueueDepth();
        if (lost) {
          Release(placed.bytes);
          for (std::unique_ptr<Job>& job : placed.batch.jobs) {
            dropped.push_back({std::move(job),
                               absl::UnavailableError("the device holding this request's "
                                                      "resident tensors faulted")});
          }
        } else if (!placed.batch.jobs.empty()) {
          PlaceOn(device, std::move(placed));
        }
        placed_something = true;  // or dropped jobs: look again either way
      }
    }
    if (!dropped.empty()) {
      mu_.Unlock();
      Answer(std::move(dropped));
      mu_.Lock();
      continue;
    }
    if (placed_something) continue;
    if (draining_ && queued_ == 0 && orphans_.empty()) break;
    // Sleep until something changes (Submit, a free lane, Poke) or a queue comes due.
    if (next_ready == absl::InfiniteFuture()) {
      dispatch_cv_.Wait(&mu_);
    } else {
      dispatch_cv_.WaitWithTimeout(&mu_, next_ready - now);
    }
  }
  dispatcher_done_ = true;
  lanes_cv_.SignalAll();
}

void Batcher::MarkUnhealthy(int device) {
  DeviceState& d = devices_[device];
  if (!d.healthy) return;
  d.healthy = false;
  --healthy_devices_;
  if (metrics_ != nullptr) metrics_->SetDeviceHealthy(device, false);
  Log(LogLevel::kError, "device_unhealthy",
      {{"device", d.device->description().name},
       {"healthy_devices", absl::StrCat(healthy_devices_)},
       {"moved_batches", absl::StrCat(d.pending.size())}});
  // Batches placed here but not started go to the other devices.
  while (!d.pending.empty()) {
    d.outstanding_flops -= d.pending.front().flops;
    ++d.free_lanes;
    orphans_.push_back(std::move(d.pending.front()));
    d.pending.pop_front();
  }
  dispatch_cv_.SignalAll();
}

void Batcher::LaneLoop(int device_index, int lane) {
  Device* device;
  {
    absl::MutexLock lock(&mu_);
    device = devices_[device_index].device;
  }
  while (true) {
    Placed placed;
    {
      absl::MutexLock lock(&mu_);
      DeviceState& d = devices_[device_index];
      while (d.pending.empty() && !dispatcher_done_) lanes_cv_.Wait(&mu_);
      if (d.pending.empty()) return;  // drained
      placed = std::move(d.pending.front());
      d.pending.pop_front();
    }
    // Last look before launch: callers may have given up while the batch waited.
    const absl::Time start = absl::Now();
    std::vector<Dropped> dropped;
    {
      const absl::Time now = clock_->Now();
      std::vector<std::unique_ptr<Job>> keep;
      for (std::unique_ptr<Job>& job : placed.batch.jobs) {
        absl::Status reason = DropReason(*job, now);
        if (reason.ok()) {
          keep.push_back(std::move(job));
        } else {
          dropped.push_back({std::move(job), std::move(reason)});
        }
      }
      placed.batch.jobs = std::move(keep);
    }
    Answer(std::move(dropped));

    // The kernel decision for a stack happens here, off the batcher's lock.
    std::vector<Batch> launches = ReadyToLaunch(std::move(placed.batch), options_.catalogue);
    std::vector<Ran> ran;
    absl::Status status = absl::OkStatus();
    for (Batch& batch : launches) {
      // After a fault the device runs nothing more: the rest fail the same way.
      ran.push_back(status.ok() ? RunOne(device, device_index, lane, std::move(batch), start)
                                : Ran{std::move(batch.jobs), status, {}});
      status = ran.back().status;
    }
    std::function<void()> on_none_healthy;
    {
      absl::MutexLock lock(&mu_);
      DeviceState& d = devices_[device_index];
      if (!status.ok() && !device->healthy() && d.healthy) {
        MarkUnhealthy(device_index);
        if (healthy_devices_ == 0) on_none_healthy = on_no_healthy_device_;
      }
      if (d.healthy) {
        ++d.free_lanes;
        d.outstanding_flops -= placed.flops;
      }
      Release(placed.bytes);
      dispatch_cv_.Signal();
    }
    if (on_none_healthy) on_none_healthy();
    for (Ran& r : ran) Complete(std::move(r), start);
  }
}

Batcher::Ran Batcher::RunOne(Device* device, int device_index, int lane, Batch batch,
                             absl::Time start) {
  const double flops = batch.problem.Flops();
  LaunchTimes times;
  const absl::Status status = device->Run(LaunchOf(batch), lane, &times);
  if (metrics_ != nullptr) {
    metrics_->ObserveBatch(static_cast<int64_t>(batch.jobs.size()));
    metrics_->AddDeviceWork(device_index, batch.problem.precision, status.ok() ? flops : 0.0,
                            absl::Now() - start);
    PublishMemory(device_index, *device);
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
  return {std::move(batch.jobs), status, result};
}

void Batcher::Complete(Ran ran, absl::Time start) {
  // Answering is gRPC work (responses are encoded as RPCs finish). A small batch is
  // answered here, which saves waking another thread per launch; a large one goes to
  // the completion threads in slices, so the lane goes back to its device sooner.
  constexpr size_t kJobsPerCompletion = 8;
  auto jobs = std::make_shared<std::vector<std::unique_ptr<Job>>>(std::move(ran.jobs));
  auto answer = [jobs, status = ran.status, result = ran.result, start](size_t first,
                                                                         size_t last) {
    for (size_t j = first; j < last; ++j) {
      JobResult mine = result;
      mine.queue = start - (*jobs)[j]->accepted;
      (*jobs)[j]->done(status, mine);
    }
  };
  if (jobs->size() <= kJobsPerCompletion) {
    answer(0, jobs->size());
    return;
  }
  for (size_t first = 0; first < jobs->size(); first += kJobsPerCompletion) {
    const size_t last = std::min(jobs->size(), first + kJobsPerCompletion);
    completions_.Schedule([answer, first, last] { answer(first, last); });
  }
}

}  // namespace gemmd
