// A fixed set of threads running queued closures in FIFO order. The batcher hands job
// completions (filling responses, finishing RPCs, which serializes them) to one, so a
// device lane goes back to the GPU instead of doing gRPC's work. Thread-safe.
#ifndef GEMMD_SERVER_SCHEDULING_THREAD_POOL_H_
#define GEMMD_SERVER_SCHEDULING_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gemmd {

class ThreadPool {
 public:
  // `name`: each thread's (NameThisThread).
  ThreadPool(int threads, std::string name);
  ~ThreadPool();  // runs everything still queued, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> work);
  // Returns once everything scheduled so far has run (new work may still be added).
  void AwaitIdle();

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_SCHEDULING_THREAD_POOL_H_
