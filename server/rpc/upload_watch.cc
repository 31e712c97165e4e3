#include "server/rpc/upload_watch.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "server/observability/thread_name.h"

namespace gemmd {

UploadWatch::UploadWatch(absl::Duration timeout) : timeout_(timeout) {
  if (timeout_ > absl::ZeroDuration())
    thread_ = std::thread([this] {
      NameThisThread("gemmd-uploads");
      Loop();
    });
}

UploadWatch::~UploadWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void UploadWatch::Add(Upload* upload) {
  if (timeout_ <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  uploads_.insert(upload);
}

void UploadWatch::Remove(Upload* upload) {
  if (timeout_ <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  uploads_.erase(upload);
}

void UploadWatch::Loop() {
  const absl::Duration period = std::min(timeout_ / 4, absl::Seconds(1));
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  while (true) {
    std::vector<std::pair<Upload*, absl::Duration>> idle;
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), period)) return;
      const absl::Time now = absl::Now();
      for (auto it = uploads_.begin(); it != uploads_.end();) {
        const auto next = std::next(it);
        const absl::Duration quiet = now - (*it)->last_activity();
        if (quiet >= timeout_) {
          (*it)->Ref();
          idle.emplace_back(*it, quiet);
          uploads_.erase(it);  // once
        }
        it = next;
      }
    }
    // Outside the lock: ending a call may run its OnDone on this thread, which calls
    // Remove.
    for (const auto& [upload, quiet] : idle) {
      upload->EndIdle(quiet);
      upload->Unref();
    }
  }
}

}  // namespace gemmd
