// Threads that run the parts of striped uploads and downloads, kept between calls. A
// part on a thread started for it began one thread start-up after the part before it,
// and a striped call waits for its slowest part (docs/BENCHMARKS.md, "Where a striped
// call's time goes"); a parked worker starts a part at once.
// Thread-safe.
#ifndef GEMMD_CLIENT_PART_WORKERS_H_
#define GEMMD_CLIENT_PART_WORKERS_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"

namespace gemmd {

class PartWorkers {
 public:
  PartWorkers() = default;
  PartWorkers(const PartWorkers&) = delete;
  PartWorkers& operator=(const PartWorkers&) = delete;
  // Waits for the parts still running (none: Run returns only when its parts are done),
  // then ends the workers.
  ~PartWorkers();

  // Runs body(0) .. body(n - 1) at once: body(0) on this thread, the others on parked
  // workers, and new ones where too few are parked (so parts never wait for each other,
  // whatever other calls run). Returns when every body has returned.
  void Run(int n, const std::function<void(int)>& body);

  // Workers made so far (for tests).
  int threads() const;

 private:
  struct Part {
    const std::function<void(int)>* body;
    int index;
    absl::BlockingCounter* done;
  };
  void Work();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); }

  mutable absl::Mutex mu_;
  std::deque<Part> queue_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // workers not running a part (each takes one)
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_PART_WORKERS_H_
