#include "client/part_workers.h"

namespace gemmd {

PartWorkers::~PartWorkers() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void PartWorkers::Run(int n, const std::function<void(int)>& body) {
  if (n <= 0) return;
  absl::BlockingCounter done(n - 1);
  {
    absl::MutexLock lock(&mu_);
    for (int i = 1; i < n; ++i) queue_.push_back({&body, i, &done});
    // Every queued part has a worker of its own: one parked, or one made now.
    for (int missing = static_cast<int>(queue_.size()) - idle_; missing > 0; --missing) {
      threads_.emplace_back([this] { Work(); });
      ++idle_;
    }
  }
  body(0);
  done.Wait();
}

int PartWorkers::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void PartWorkers::Work() {
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(this, &PartWorkers::HasWork));
    if (queue_.empty()) break;  // stopping, and nothing left to run
    const Part part = queue_.front();
    queue_.pop_front();
    --idle_;
    mu_.Unlock();
    (*part.body)(part.index);
    mu_.Lock();
    // Parked again before the Run is told: a Run right after it finds this worker.
    ++idle_;
    part.done->DecrementCount();
  }
  mu_.Unlock();
}

}  // namespace gemmd
