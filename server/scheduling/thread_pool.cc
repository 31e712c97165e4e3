#include "server/scheduling/thread_pool.h"

#include <algorithm>
#include <utility>

#include "server/observability/thread_name.h"

namespace gemmd {

ThreadPool::ThreadPool(int threads, std::string name) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this, name] {
      NameThisThread(name);
      WorkerLoop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
}

void ThreadPool::AwaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ThreadPool* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->queue_.empty() && self->running_ == 0;
      },
      this));
}

void ThreadPool::WorkerLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](ThreadPool* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->queue_.empty() || self->stopping_;
        },
        this));
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    mu_.Unlock();
    work();
    work = nullptr;  // release what it captured before counting it done
    mu_.Lock();
    --running_;
  }
}

}  // namespace gemmd
