// The dynamic batcher (docs/ARCHITECTURE.md): one queue per batch key; a dispatcher thread
// forms batches and places them on devices; `lanes()` worker threads per device run
// them. Thread-safe.
//
// A key's queue becomes a batch when it holds max_batch_size jobs (or the bytes one
// batch may take on a device), when its oldest job has waited max_queue_delay, or when
// the batcher drains; and at once when a device is idle and no other request is on its
// way (SetArriving; unless wait_when_idle): waiting then only adds latency. The batch
// then waits until some healthy device has a free lane and goes to the one with the
// least outstanding work (FLOPs). While every lane is busy, queues keep growing, so
// batches get bigger exactly when the devices are the bottleneck. max_batch_size = 1
// turns batching off (every job is its own launch).
//
// Admission (Submit): RESOURCE_EXHAUSTED at once when max_queue_size jobs wait, or when
// one job alone is larger than a device lets a batch be; UNAVAILABLE while draining or
// when no device is healthy. (Host memory is capped by the service, HostMemory.) Expired jobs (DEADLINE_EXCEEDED) and cancelled ones (CANCELLED)
// are answered when their batch forms and again just before it launches; they never
// reach a device. A device fault fails that batch's jobs (INTERNAL, from the device),
// marks the device unhealthy, and moves batches placed on it but not yet started to
// other devices; with no healthy device left, every waiting job gets UNAVAILABLE.
#ifndef GEMMD_SERVER_SCHEDULING_BATCHER_H_
#define GEMMD_SERVER_SCHEDULING_BATCHER_H_

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/scheduling/batch.h"
#include "server/observability/clock.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"
#include "server/scheduling/job_executor.h"
#include "server/observability/metrics.h"
#include "server/scheduling/thread_pool.h"

namespace gemmd {

class Batcher : public JobExecutor {
 public:
  struct Options {
    uint32_t max_batch_size = 64;
    absl::Duration max_queue_delay = absl::Microseconds(100);
    size_t max_queue_size = 1024;
    // Threads that answer finished jobs (fill responses, finish RPCs) off the lanes.
    int completion_threads = 4;
    // Hold a lone job for max_queue_delay even when a device is idle and nothing else
    // is arriving (the batch window as a fixed delay).
    bool wait_when_idle = false;
    // Stacks of QuantizedMatmuls against one resident weight hold at most this many A
    // rows (the skinny kernels' range).
    int64_t max_stacked_quantized_rows = 64;
    // Chooses the kernel of a stack of jobs against one resident B (for the stack's M),
    // on the lane that launches it. Null, or no kernel for a stack: its jobs run one by
    // one, each on its own kernel. Must outlive the batcher.
    const KernelCatalogue* catalogue = nullptr;
  };

  // `devices`, `metrics` (may be null) and `clock` must outlive the batcher.
  Batcher(std::vector<Device*> devices, Options options, ServerMetrics* metrics,
          Clock* clock = Clock::Real());
  ~Batcher() override;  // drains

  absl::Status Submit(std::unique_ptr<Job> job) override;
  absl::Status CheckRoom(int64_t arriving) const override;
  void Drain() override;

  // Runs (outside any lock, on a batcher thread) when the last healthy device fails.
  void SetOnNoHealthyDevice(std::function<void()> callback);
  // The count of requests admitted whose job is not submitted yet (the service's): while
  // it is 0 and a device is idle, a queued job need not wait for company. Without it,
  // jobs always wait max_queue_delay. Must outlive the batcher.
  void SetArriving(const std::atomic<int64_t>* arriving);
  // Re-reads the clock now (tests call it after stepping a fake clock).
  void Poke();

  const Options& options() const { return options_; }
  size_t QueueDepth() const;
  int64_t InflightBytes() const;
  int HealthyDevices() const;
  bool draining() const;
  // Queued jobs whose caller has already given up (they will be dropped at dequeue).
  size_t CancelledJobsWaiting() const;

 private:
  struct Queued {
    std::unique_ptr<Job> job;
    absl::Time enqueued;
    uint64_t seq = 0;  // arrival order (times can tie)
    int64_t bytes = 0;
  };
  struct KeyQueue {
    std::deque<Queued> jobs;
    int64_t bytes = 0;
  };
  struct Placed {
    Batch batch;
    double flops = 0;
    int64_t bytes = 0;
  };
  struct DeviceState {
    Device* device = nullptr;
    int index = 0;
    int lanes = 0;
    int free_lanes = 0;
    double outstanding_flops = 0;
    bool healthy = true;
    std::deque<Placed> pending;  // placed here, not yet taken by a lane
  };
  // A job leaving without reaching a device, answered outside the lock.
  struct Dropped {
    std::unique_ptr<Job> job;
    absl::Status status;
  };

  // One launch's jobs as they come off the device.
  struct Ran {
    std::vector<std::unique_ptr<Job>> jobs;
    absl::Status status;
    JobResult result;
  };

  void DispatchLoop();
  void LaneLoop(int device, int lane);
  // Runs a batch ready to launch on the lane's device (no lock held).
  Ran RunOne(Device* device, int device_index, int lane, Batch batch, absl::Time start);
  // Answers a launch's jobs, here or (many of them) on the completion threads.
  void Complete(Ran ran, absl::Time start);
  // The key whose batch should go next (oldest head among ready ones), or null; sets
  // *next_ready to when the earliest not-yet-ready queue becomes ready.
  const BatchKey* ReadyKey(absl::Time now, absl::Time* next_ready) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Healthy device with a free lane and the least outstanding work (`required`, when
  // >= 0, or none); -1 if none.
  int PickDevice(int required = -1) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a queued job should go now rather than wait for company: some healthy
  // device has every lane free and no request is on its way.
  bool IdleNow() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Placed FormBatch(const BatchKey& key, KeyQueue& queue, absl::Time now,
                   std::vector<Dropped>* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlaceOn(int device, Placed placed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a job must not run now (expired, cancelled), or OK.
  absl::Status DropReason(const Job& job, absl::Time now) const;
  void FailAllQueued(const absl::Status& status, std::vector<Dropped>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkUnhealthy(int device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Answer(std::vector<Dropped> dropped);
  void Release(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishQueueDepth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // gemm_device_memory_bytes of one device (metrics_ is set).
  void PublishMemory(int device_index, const Device& device);
  // Submit's refusals for a job of `bytes` operand bytes with `arriving` more promised a
  // place, or OK.
  absl::Status Admission(int64_t bytes, int64_t arriving) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  ServerMetrics* const metrics_;
  Clock* const clock_;
  int64_t max_batch_bytes_ = 0;  // the smallest any device allows

  const std::atomic<int64_t>* arriving_ ABSL_GUARDED_BY(mu_) = nullptr;
  mutable absl::Mutex mu_;
  absl::CondVar dispatch_cv_;  // work for the dispatcher: jobs, a free lane, a poke
  absl::CondVar lanes_cv_;     // work for the lanes: a placed batch, or the end
  absl::flat_hash_map<BatchKey, KeyQueue> queues_ ABSL_GUARDED_BY(mu_);
  std::deque<Placed> orphans_ ABSL_GUARDED_BY(mu_);  // from a device that faulted
  std::deque<DeviceState> devices_ ABSL_GUARDED_BY(mu_);  // (deque: never relocates)
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int healthy_devices_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool dispatcher_done_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_no_healthy_device_ ABSL_GUARDED_BY(mu_);

  ThreadPool completions_;
  std::thread dispatcher_;
  std::vector<std::thread> lanes_;
  absl::Mutex join_mu_;  // serializes Drain()
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_BATCHER_H_
