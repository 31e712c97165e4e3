// A bounded FIFO shared by one worker thread per device: whichever device is idle takes
// the oldest job, which places work on the least-loaded device. Expired and cancelled
// jobs are answered (DEADLINE_EXCEEDED / CANCELLED) when dequeued and never reach a
// device. Thread-safe.
#ifndef GEMMD_SERVER_FIFO_EXECUTOR_H_
#define GEMMD_SERVER_FIFO_EXECUTOR_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/device.h"
#include "server/job_executor.h"
#include "server/metrics.h"

namespace gemmd {

class FifoExecutor : public JobExecutor {
 public:
  struct Options {
    size_t max_queue_size = 1024;
  };

  // `devices` and `metrics` (may be null) must outlive the executor.
  FifoExecutor(std::vector<Device*> devices, Options options, ServerMetrics* metrics);
  ~FifoExecutor() override;  // drains

  absl::Status Submit(std::unique_ptr<Job> job) override;
  void Drain() override;

  size_t QueueDepth() const;
  bool draining() const;
  // Queued jobs whose caller has already given up (they will be dropped at dequeue).
  size_t CancelledJobsWaiting() const;

 private:
  void WorkerLoop(int worker);
  void RunJob(Device* device, int device_index, std::unique_ptr<Job> job);

  const std::vector<Device*> devices_;
  const Options options_;
  ServerMetrics* const metrics_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
  absl::Mutex join_mu_;  // serializes Drain()
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_FIFO_EXECUTOR_H_
