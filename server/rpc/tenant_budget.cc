#include "server/rpc/tenant_budget.h"

#include "absl/strings/str_cat.h"

namespace gemmd {

absl::Status TenantBudget::Exhausted(const std::string& tenant, int64_t held,
                                     int64_t asked) const {
  const std::string needs = asked > 0 ? absl::StrCat(" and this one needs ", asked) : "";
  return absl::ResourceExhaustedError(
      absl::StrCat("tenant ", tenant, "'s calls hold ", held, " bytes", needs,
                   " (--tenant_max_inflight_bytes=", cap_, "); retry when some have finished"));
}

absl::Status TenantBudget::CheckRoom(const std::string& tenant) const {
  if (cap_ <= 0 || tenant.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  const auto it = held_.find(tenant);
  const int64_t held = it == held_.end() ? 0 : it->second;
  return held >= cap_ ? Exhausted(tenant, held, 0) : absl::OkStatus();
}

absl::Status TenantBudget::Charge(const std::string& tenant, int64_t bytes) {
  if (cap_ <= 0 || tenant.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  const auto it = held_.find(tenant);
  const int64_t held = it == held_.end() ? 0 : it->second;
  if (bytes > cap_ - held) return Exhausted(tenant, held, bytes);
  held_[tenant] = held + bytes;
  return absl::OkStatus();
}

void TenantBudget::Release(const std::string& tenant, int64_t bytes) {
  if (cap_ <= 0 || tenant.empty() || bytes == 0) return;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(tenant);
  if (it != held_.end() && (it->second -= bytes) <= 0) held_.erase(it);
}

int64_t TenantBudget::held(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  const auto it = held_.find(tenant);
  return it == held_.end() ? 0 : it->second;
}

}  // namespace gemmd
