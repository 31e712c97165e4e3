#include "server/devices/host_copier.h"

#include <algorithm>
#include <cstring>

#include "server/observability/thread_name.h"

namespace gemmd {
namespace {

// Below this a piece is not worth handing to another thread.
constexpr size_t kMinPieceBytes = size_t{256} << 10;

}  // namespace

HostCopier::HostCopier(int helper_threads) : ways_(std::max(0, helper_threads) + 1) {
  for (int i = 0; i < helper_threads; ++i) {
    helpers_.emplace_back([this] {
      NameThisThread("gemmd-copy");
      HelperLoop();
    });
  }
}

HostCopier::~HostCopier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : helpers_) t.join();
}

bool HostCopier::RunOne() {
  if (queue_.empty()) return false;
  Piece piece = queue_.front();
  queue_.pop_front();
  mu_.Unlock();
  std::memcpy(piece.task.dst, piece.task.src, piece.task.bytes);
  mu_.Lock();
  --piece.call->pending;
  return true;
}

void HostCopier::HelperLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](HostCopier* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->queue_.empty() || self->stopping_;
        },
        this));
    if (queue_.empty()) return;  // stopping
    RunOne();
  }
}

void HostCopier::Copy(const std::vector<Task>& tasks) {
  size_t total = 0;
  for (const Task& t : tasks) total += t.bytes;
  if (helpers_.empty() || total < 2 * kMinPieceBytes) {
    for (const Task& t : tasks) std::memcpy(t.dst, t.src, t.bytes);
    return;
  }
  // Pieces of about total/ways bytes (at least kMinPieceBytes), so every thread gets work.
  const size_t piece_bytes = std::max(kMinPieceBytes, (total + ways_ - 1) / ways_);
  Call call;
  absl::MutexLock lock(&mu_);
  for (const Task& t : tasks) {
    for (size_t at = 0; at < t.bytes; at += piece_bytes) {
      const size_t n = std::min(piece_bytes, t.bytes - at);
      queue_.push_back({{static_cast<char*>(t.dst) + at, static_cast<const char*>(t.src) + at, n},
                        &call});
      ++call.pending;
    }
  }
  // Work alongside the helpers (on any caller's pieces) until ours are all taken.
  while (call.pending > 0 && RunOne()) {
  }
  mu_.Await(absl::Condition(
      +[](Call* c) { return c->pending == 0; }, &call));
}

}  // namespace gemmd
