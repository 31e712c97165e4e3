#include "server/rpc/call_registry.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace gemmd {

absl::Status CallRegistry::RefuseLocked() {
  last_refused_ = absl::Now();
  return absl::UnavailableError("server is shutting down");
}

absl::Status CallRegistry::Enter(const void* call, bool continues,
                                 std::function<void()> on_draining) {
  absl::MutexLock lock(&mu_);
  if (draining_ && !continues) return RefuseLocked();
  calls_.emplace(call, std::move(on_draining));
  return absl::OkStatus();
}

void CallRegistry::Leave(const void* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

absl::Status CallRegistry::CheckOpen(bool continues) {
  absl::MutexLock lock(&mu_);
  return draining_ && !continues ? RefuseLocked() : absl::OkStatus();
}

void CallRegistry::StartDraining() {
  absl::MutexLock lock(&mu_);
  if (draining_) return;
  draining_ = true;
  last_refused_ = absl::Now();  // quiet counts from here: clients have yet to hear
  for (auto& [call, on_draining] : calls_) {
    if (on_draining) on_draining();
  }
}

bool CallRegistry::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

size_t CallRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return calls_.size();
}

bool CallRegistry::AwaitEmpty(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&empty), deadline);
}

bool CallRegistry::AwaitQuiet(absl::Duration quiet, absl::Time deadline) {
  while (true) {
    absl::Time quiet_at;
    {
      absl::MutexLock lock(&mu_);
      quiet_at = last_refused_ + quiet;
    }
    const absl::Time now = absl::Now();
    if (now >= quiet_at) return true;
    if (now >= deadline) return false;
    absl::SleepFor(std::min(quiet_at, deadline) - now);
  }
}

}  // namespace gemmd
