#include "server/regions/region_table.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/observability/log.h"

namespace gemmd {
namespace {

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxKeyBytes = 255;  // NAME_MAX for a file under /dev/shm

// Names: [A-Za-z0-9._-]; keys also '@', which ends a tenant's part of a key (tenant
// names cannot hold it, so one tenant's keys never fall under another's prefix).
bool AllowedChars(absl::string_view s, bool key = false) {
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || (key && c == '@');
    if (!ok) return false;
  }
  return true;
}

absl::Status AlreadyRegistered(absl::string_view name) {
  return absl::AlreadyExistsError(
      absl::StrCat("a region named '", name, "' is registered already; unregister it first"));
}

}  // namespace

absl::Status RegionsOff() {
  return absl::FailedPreconditionError(
      "shared-memory regions are off on this server (--shm=off); send the tensors inline");
}

absl::Status RegionTable::CheckKey(const std::string& tenant, const std::string& key) const {
  const std::string prefix =
      absl::StrCat("/", settings_.prefix, tenant.empty() ? "" : absl::StrCat(tenant, "@"));
  if (key.size() > kMaxKeyBytes || key.size() < 2 || key[0] != '/' ||
      !AllowedChars(absl::string_view(key).substr(1), /*key=*/true)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key must be '/' and 1-", kMaxKeyBytes - 1,
        " of [A-Za-z0-9._@-] (a POSIX shared-memory name), e.g. \"", prefix, "mine\""));
  }
  if (!absl::StartsWith(key, prefix) || key.size() == prefix.size()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "key \"", key, "\" is outside this ", tenant.empty() ? "server's" : "tenant's",
        " shared-memory names: they start with \"", prefix, "\" (--shm_prefix)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SharedRegion>> RegionTable::Register(const std::string& tenant,
                                                                    const std::string& name,
                                                                    const std::string& key,
                                                                    int64_t offset,
                                                                    int64_t bytes) {
  if (!enabled()) return RegionsOff();
  if (name.empty() || name.size() > kMaxNameBytes || !AllowedChars(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name must be 1-", kMaxNameBytes, " of [A-Za-z0-9._-]"));
  }
  if (absl::Status s = CheckKey(tenant, key); !s.ok()) return s;
  int64_t room = 0;
  {
    absl::MutexLock lock(&mu_);
    if (regions_.count(std::make_pair(tenant, name)) > 0) {
      return AlreadyRegistered(name);
    }
    room = settings_.max_bytes - bytes_;
  }
  // Mapped (and page-locked, which can take a while) outside the lock, if it fits the
  // room left; then checked again against the caps and the name, which may have changed
  // meanwhile.
  absl::StatusOr<std::shared_ptr<SharedRegion>> region =
      SharedRegion::Map(name, key, offset, bytes, settings_.pinning, room);
  if (!region.ok()) return region.status();
  absl::MutexLock lock(&mu_);
  const int64_t size = (*region)->bytes();
  if (bytes_ + size > settings_.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("regions would take ", bytes_ + size, " bytes; this server maps at most ",
                     settings_.max_bytes, " (--shm_max_bytes)"));
  }
  uint32_t held = 0;
  for (auto it = regions_.lower_bound(std::make_pair(tenant, std::string()));
       it != regions_.end() && it->first.first == tenant; ++it) {
    ++held;
  }
  if (held >= settings_.max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the caller holds ", held, " regions, the most one tenant may (--shm_max_regions)"));
  }
  if (!regions_.emplace(std::make_pair(tenant, name), *region).second) {
    return AlreadyRegistered(name);
  }
  bytes_ += size;
  Publish();
  Log(LogLevel::kInfo, "region_registered",
      {{"name", name}, {"key", key}, {"bytes", absl::StrCat(size)},
       {"page_locked", (*region)->page_locked() ? "true" : "false"}, {"tenant", tenant}});
  return region;
}

absl::Status RegionTable::Unregister(const std::string& tenant, absl::string_view name) {
  if (!enabled()) return RegionsOff();
  std::shared_ptr<SharedRegion> region;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(std::make_pair(tenant, std::string(name)));
    if (it == regions_.end()) {
      return absl::NotFoundError(absl::StrCat("no region named '", name, "'"));
    }
    region = std::move(it->second);
    regions_.erase(it);
    bytes_ -= region->bytes();
    Publish();
  }
  region->MarkUnregistered();
  Log(LogLevel::kInfo, "region_unregistered",
      {{"name", region->name()}, {"key", region->key()}, {"tenant", tenant}});
  return absl::OkStatus();  // unmapped here, or when the last call using it lets go
}

absl::StatusOr<std::shared_ptr<SharedRegion>> RegionTable::Find(const std::string& tenant,
                                                                absl::string_view name) const {
  if (!enabled()) return RegionsOff();
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(std::make_pair(tenant, std::string(name)));
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("no region named '", name, "' (RegisterRegion)"));
  }
  return it->second;
}

std::vector<std::shared_ptr<SharedRegion>> RegionTable::List(const std::string& tenant) const {
  std::vector<std::shared_ptr<SharedRegion>> out;
  absl::MutexLock lock(&mu_);
  for (auto it = regions_.lower_bound(std::make_pair(tenant, std::string()));
       it != regions_.end() && it->first.first == tenant; ++it) {
    out.push_back(it->second);
  }
  return out;
}

void RegionTable::Publish() const {
  if (metrics_ != nullptr) metrics_->SetRegions(bytes_, static_cast<int64_t>(regions_.size()));
}

int64_t RegionTable::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void RegionTable::Clear() {
  std::map<std::pair<std::string, std::string>, std::shared_ptr<SharedRegion>, std::less<>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(regions_);
    bytes_ = 0;
    Publish();
  }
  for (auto& [key, region] : all) region->MarkUnregistered();
}

}  // namespace gemmd
