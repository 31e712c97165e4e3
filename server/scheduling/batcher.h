// The dynamic batcher (docs/ARCHITECTURE.md): jobs wait in queues by batch key
// (BatchQueues); batches are formed and placed on devices (DevicePlacement) where the
// state changes, by the thread that queued a job or the lane that freed, and by a
// dispatcher thread for queues that come due later; `lanes()` threads per device run them
// and answer their jobs (LaunchRunner). The batcher is the glue and the one lock over the
// queues and the placement; nothing runs on a device or chooses a kernel under it.
// Thread-safe.
//
// A key's queue becomes a batch when it is ready (batch_queues.h), when the batcher
// drains, and at once when a device is idle and no other request is on its way
// (SetArriving; unless wait_when_idle): waiting then only adds latency. The batch then
// waits until some healthy device has a free lane and goes to the one with the least
// outstanding work (FLOPs). While every lane is busy, queues keep growing, so batches get
// bigger exactly when the devices are the bottleneck. max_batch_size = 1 turns batching
// off (every job is its own launch).
//
// Admission (Submit): RESOURCE_EXHAUSTED at once when max_queue_size jobs wait, or when
// one job alone is larger than a device lets a batch be; UNAVAILABLE while draining or
// when no device is healthy. (Host memory is capped by the service, HostMemory.) Expired
// jobs (DEADLINE_EXCEEDED) and cancelled ones (CANCELLED) are answered when their batch
// forms and again just before it launches; they never reach a device. A device fault
// fails that batch's jobs (INTERNAL, from the device), marks the device unhealthy, and
// moves batches placed on it but not yet started to other devices; with no healthy
// device left, every waiting job gets UNAVAILABLE.
#ifndef GEMMD_SERVER_SCHEDULING_BATCHER_H_
#define GEMMD_SERVER_SCHEDULING_BATCHER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/devices/device.h"
#include "server/devices/kernel_catalogue.h"
#include "server/observability/clock.h"
#include "server/observability/metrics.h"
#include "server/scheduling/batch_queues.h"
#include "server/scheduling/device_placement.h"
#include "server/scheduling/job_executor.h"
#include "server/scheduling/launch_runner.h"

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

  absl::Status Submit(std::unique_ptr<Job>* job) override;
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
  void DispatchLoop();
  void LaneLoop(int device, int lane);
  // One step of the dispatcher: an orphan placed (or failed), or a ready queue's batch
  // formed and placed. Returns whether it did something; *next_due as NextReady's.
  bool DispatchOne(absl::Time now, absl::Time* next_due, std::vector<DroppedJob>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forms and places every batch that can go now, where the state changed (a job
  // queued, a lane freed): the batch reaches its lane without waking the dispatcher,
  // which is left the queues that come due later, orphans and the end.
  void DispatchReady(std::vector<DroppedJob>* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a queued job should go now rather than wait for company: some healthy
  // device has every lane free and no request is on its way.
  bool IdleNow() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails a batch that cannot run anywhere (its jobs' resident tensors are lost).
  void FailBatch(FormedBatch batch, const absl::Status& status, std::vector<DroppedJob>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkUnhealthy(int device) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishQueueDepth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit's refusals for a job of `bytes` operand bytes with `arriving` more promised a
  // place, or OK.
  absl::Status Admission(int64_t bytes, int64_t arriving) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  ServerMetrics* const metrics_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  absl::CondVar dispatch_cv_;  // work for the dispatcher: jobs, a free lane, a poke
  absl::CondVar lanes_cv_;     // work for the lanes: a placed batch, or the end
  const std::atomic<int64_t>* arriving_ ABSL_GUARDED_BY(mu_) = nullptr;
  DevicePlacement placement_ ABSL_GUARDED_BY(mu_);
  BatchQueues queues_ ABSL_GUARDED_BY(mu_);  // (after placement_: sized by it)
  // What batches formed and not yet done hold (the queues count their own).
  int64_t taken_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool dispatcher_done_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_no_healthy_device_ ABSL_GUARDED_BY(mu_);

  LaunchRunner runner_;
  std::thread dispatcher_;
  std::vector<std::thread> lanes_;
  absl::Mutex join_mu_;  // serializes Drain()
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_BATCHER_H_
