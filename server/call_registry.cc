#include "server/call_registry.h"

namespace gemmd {

absl::Status CallRegistry::Enter(Member* call) {
  absl::MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("server is shutting down");
  calls_.insert(call);
  return absl::OkStatus();
}

void CallRegistry::Leave(Member* call) {
  absl::MutexLock lock(&mu_);
  calls_.erase(call);
}

void CallRegistry::StartDraining() {
  absl::MutexLock lock(&mu_);
  if (draining_) return;
  draining_ = true;
  const absl::Status status = absl::UnavailableError("server is shutting down");
  for (Member* call : calls_) call->OnDraining(status);
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

}  // namespace gemmd
