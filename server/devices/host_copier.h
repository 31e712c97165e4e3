// Large host memcpy spread over a few threads. Staging a 4096^2 operand through pinned
// memory is bound by one core's memcpy rate (~8 GB/s measured on the H200 host), below
// what the PCIe/NVLink DMA behind it moves (~50 GB/s pinned), so the server copies big
// ranges with several threads. Small copies stay on the calling thread (a handoff costs
// more than it saves). Thread-safe: concurrent Copy calls (the device's lanes) share the
// helpers, and a caller works on queued pieces while it waits.
#ifndef GEMMD_SERVER_DEVICES_HOST_COPIER_H_
#define GEMMD_SERVER_DEVICES_HOST_COPIER_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gemmd {

class HostCopier {
 public:
  struct Task {
    void* dst;
    const void* src;
    size_t bytes;
  };

  // `helper_threads` besides the callers; 0 copies on the caller alone.
  explicit HostCopier(int helper_threads);
  ~HostCopier();
  HostCopier(const HostCopier&) = delete;
  HostCopier& operator=(const HostCopier&) = delete;

  // Copies every task (non-overlapping ranges); returns when all bytes are in place.
  void Copy(const std::vector<Task>& tasks);

 private:
  struct Call {
    size_t pending = 0;  // pieces not yet copied; guarded by mu_
  };
  struct Piece {
    Task task;
    Call* call;
  };

  void HelperLoop();
  // Copies one queued piece if there is one (lock held on entry and exit).
  bool RunOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<Piece> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
  const int ways_;  // helpers + the caller
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_HOST_COPIER_H_
