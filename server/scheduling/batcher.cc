#include "server/scheduling/batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/observability/log.h"
#include "server/observability/thread_name.h"

namespace gemmd {
namespace {

BatchQueues::Options QueueOptions(const Batcher::Options& o, int64_t max_batch_bytes) {
  BatchQueues::Options q;
  q.max_batch_size = o.max_batch_size;
  q.max_queue_delay = o.max_queue_delay;
  q.max_batch_bytes = max_batch_bytes;
  q.max_stacked_quantized_rows = o.max_stacked_quantized_rows;
  return q;
}

const absl::Status& NoHealthyDevice() {
  static const absl::Status status =
      absl::UnavailableError("no healthy device: every device of this server has faulted");
  return status;
}

}  // namespace

Batcher::Batcher(std::vector<Device*> devices, Options options, ServerMetrics* metrics,
                 Clock* clock)
    : options_(options),
      metrics_(metrics),
      clock_(clock),
      placement_(devices),
      queues_(QueueOptions(options, placement_.max_batch_bytes())),
      runner_(options.catalogue, metrics, clock, options.completion_threads) {
  if (metrics_ != nullptr) {
    for (size_t i = 0; i < devices.size(); ++i) {
      const DeviceMemoryUsage usage = devices[i]->memory();
      metrics_->SetDeviceMemory(static_cast<int>(i), usage.device_pool_bytes,
                                usage.device_limit_bytes, usage.pinned_bytes);
      metrics_->SetDeviceHealthy(static_cast<int>(i), devices[i]->healthy());
    }
  }
  dispatcher_ = std::thread([this] {
    NameThisThread("gemmd-dispatch");
    DispatchLoop();
  });
  for (size_t d = 0; d < devices.size(); ++d) {
    for (int lane = 0; lane < std::max(1, devices[d]->lanes()); ++lane) {
      lanes_.emplace_back([this, d, lane] {
        NameThisThread(absl::StrCat("gemmd-lane", d, ".", lane));
        LaneLoop(static_cast<int>(d), lane);
      });
    }
  }
}

Batcher::~Batcher() { Drain(); }

absl::Status Batcher::Submit(std::unique_ptr<Job>* job) {
  const int64_t bytes = JobBytes(**job);
  std::vector<DroppedJob> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Admission(bytes, 0); !s.ok()) return s;  // the job stays the caller's
    const bool look = queues_.Push(std::move(*job), bytes, clock_->Now());
    PublishQueueDepth();
    if (look || IdleNow()) DispatchReady(&dropped);
  }
  AnswerDropped(std::move(dropped));
  return absl::OkStatus();
}

absl::Status Batcher::CheckRoom(int64_t arriving) const {
  absl::MutexLock lock(&mu_);
  return Admission(0, arriving);
}

absl::Status Batcher::Admission(int64_t bytes, int64_t arriving) const {
  if (draining_) return absl::UnavailableError("server is shutting down");
  if (placement_.healthy_devices() == 0) return NoHealthyDevice();
  if (bytes > placement_.max_batch_bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the operands and result take ", bytes, " bytes; a device here takes at most ",
        placement_.max_batch_bytes(), " per launch (see --device_memory_limit_bytes)"));
  }
  if (queues_.jobs() >= options_.max_queue_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", queues_.jobs(), " jobs waiting (--max_queue_size=",
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
  runner_.AwaitIdle();  // every job answered
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
  return queues_.jobs();
}

int64_t Batcher::InflightBytes() const {
  absl::MutexLock lock(&mu_);
  return queues_.bytes() + taken_bytes_;
}

int Batcher::HealthyDevices() const {
  absl::MutexLock lock(&mu_);
  return placement_.healthy_devices();
}

bool Batcher::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

size_t Batcher::CancelledJobsWaiting() const {
  absl::MutexLock lock(&mu_);
  return queues_.CancelledWaiting();
}

bool Batcher::IdleNow() const {
  if (options_.wait_when_idle || arriving_ == nullptr ||
      arriving_->load(std::memory_order_acquire) > 0) {
    return false;
  }
  return placement_.AnyIdle();
}

void Batcher::PublishQueueDepth() {
  if (metrics_ != nullptr) metrics_->SetQueueDepth(static_cast<int64_t>(queues_.jobs()));
}

void Batcher::FailBatch(FormedBatch batch, const absl::Status& status,
                        std::vector<DroppedJob>* dropped) {
  taken_bytes_ -= batch.bytes;
  for (std::unique_ptr<Job>& job : batch.batch.jobs) dropped->push_back({std::move(job), status});
}

bool Batcher::DispatchOne(absl::Time now, absl::Time* next_due,
                          std::vector<DroppedJob>* dropped) {
  *next_due = absl::InfiniteFuture();
  // Orphans of a faulted device first.
  if (placement_.has_orphans()) {
    if (placement_.next_orphan().batch.jobs.front()->device >= 0) {
      // Its jobs' resident tensors are on the device that faulted: nowhere else to run.
      FailBatch(placement_.TakeOrphan(),
                absl::UnavailableError("the device holding this request's resident tensors "
                                       "faulted; they are lost"),
                dropped);
      return true;
    }
    if (const int device = placement_.Pick(); device >= 0) {
      placement_.Place(device, placement_.TakeOrphan());
      lanes_cv_.SignalAll();
      return true;
    }
  }
  const BatchKey* key = queues_.NextReady(now, draining_ || IdleNow(), next_due);
  if (key == nullptr) return false;
  const bool lost = key->device >= 0 && !placement_.healthy(key->device);
  const int device = placement_.Pick(key->device);
  if (!lost && device < 0) return false;  // wait for a free lane
  FormedBatch formed = queues_.Take(*key, now, dropped);
  PublishQueueDepth();
  if (formed.batch.jobs.empty()) return true;  // all dropped: look again
  taken_bytes_ += formed.bytes;
  if (lost) {
    FailBatch(std::move(formed),
              absl::UnavailableError("the device holding this request's resident tensors "
                                     "faulted"),
              dropped);
  } else {
    placement_.Place(device, std::move(formed));
    lanes_cv_.SignalAll();
  }
  return true;
}

void Batcher::DispatchReady(std::vector<DroppedJob>* dropped) {
  if (placement_.healthy_devices() == 0) return;  // the dispatcher fails what waits
  const absl::Time now = clock_->Now();
  absl::Time next_due;
  while (DispatchOne(now, &next_due, dropped)) {
  }
  // Jobs still waiting while a lane is free wait for their due time, which only the
  // dispatcher's timed sleep catches; with no lane free, the lane that frees dispatches
  // them. Draining, the dispatcher ends once the queues are empty, so it must look.
  if ((queues_.jobs() > 0 && placement_.Pick() >= 0) || draining_) dispatch_cv_.Signal();
}

void Batcher::DispatchLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    std::vector<DroppedJob> dropped;
    if (placement_.healthy_devices() == 0) {
      queues_.TakeAll(NoHealthyDevice(), &dropped);
      while (placement_.has_orphans()) FailBatch(placement_.TakeOrphan(), NoHealthyDevice(), &dropped);
      PublishQueueDepth();
    }
    const absl::Time now = clock_->Now();
    absl::Time next_due;
    const bool did = DispatchOne(now, &next_due, &dropped);
    if (!dropped.empty()) {
      mu_.Unlock();
      AnswerDropped(std::move(dropped));
      mu_.Lock();
      continue;
    }
    if (did) continue;
    if (draining_ && queues_.jobs() == 0 && !placement_.has_orphans()) break;
    // Sleep until something changes (Submit, a free lane, Poke) or a queue comes due.
    if (next_due == absl::InfiniteFuture()) {
      dispatch_cv_.Wait(&mu_);
    } else {
      dispatch_cv_.WaitWithTimeout(&mu_, next_due - now);
    }
  }
  dispatcher_done_ = true;
  lanes_cv_.SignalAll();
}

void Batcher::MarkUnhealthy(int device) {
  const int moved = placement_.MarkUnhealthy(device);
  if (moved < 0) return;
  if (metrics_ != nullptr) metrics_->SetDeviceHealthy(device, false);
  Log(LogLevel::kError, "device_unhealthy",
      {{"device", placement_.device(device)->description().name},
       {"healthy_devices", absl::StrCat(placement_.healthy_devices())},
       {"moved_batches", absl::StrCat(moved)}});
  dispatch_cv_.SignalAll();
}

void Batcher::LaneLoop(int device_index, int lane) {
  Device* device;
  {
    absl::MutexLock lock(&mu_);
    device = placement_.device(device_index);
  }
  while (true) {
    FormedBatch formed;
    {
      absl::MutexLock lock(&mu_);
      while (!placement_.TakePlaced(device_index, &formed)) {
        if (dispatcher_done_) return;  // drained
        lanes_cv_.Wait(&mu_);
      }
    }
    std::vector<LaunchRunner::Ran> ran =
        runner_.Run(device, device_index, lane, std::move(formed.batch));
    const absl::Status status = LaunchRunner::FirstFailure(ran);
    std::function<void()> on_none_healthy;
    std::vector<DroppedJob> dropped;
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && !device->healthy() && placement_.healthy(device_index)) {
        MarkUnhealthy(device_index);
        if (placement_.healthy_devices() == 0) on_none_healthy = on_no_healthy_device_;
      }
      placement_.Done(device_index, formed.flops);
      taken_bytes_ -= formed.bytes;
      DispatchReady(&dropped);
    }
    AnswerDropped(std::move(dropped));
    if (on_none_healthy) on_none_healthy();
    runner_.Answer(std::move(ran));
  }
}

}  // namespace gemmd
