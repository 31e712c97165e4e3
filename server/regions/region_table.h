// The shared-memory regions callers have registered, per tenant: names confined to a
// prefix, a cap on their bytes (all tenants together) and on their count (per tenant),
// and a tenant's regions invisible to every other (NOT_FOUND, as for a name nobody
// registered). Thread-safe.
#ifndef GEMMD_SERVER_REGIONS_REGION_TABLE_H_
#define GEMMD_SERVER_REGIONS_REGION_TABLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/observability/metrics.h"
#include "server/regions/shared_region.h"

namespace gemmd {

struct RegionSettings {
  // Every key is "/" + prefix + (the tenant's name + "@", when callers authenticate) +
  // the rest. Empty: regions are off (--shm=off).
  std::string prefix = "gemmd-";
  int64_t max_bytes = int64_t{16} << 30;  // all regions together
  uint32_t max_regions = 64;              // per tenant
  HostPinning pinning;
};

class RegionTable {
 public:
  // `metrics` (may be null) gets the regions' bytes and count as they change.
  explicit RegionTable(RegionSettings settings, ServerMetrics* metrics = nullptr)
      : settings_(std::move(settings)), metrics_(metrics) {}

  bool enabled() const { return !settings_.prefix.empty(); }
  const RegionSettings& settings() const { return settings_; }

  // Maps `key` for `tenant` under `name` (SharedRegion::Map's errors, and):
  // FAILED_PRECONDITION with --shm=off; INVALID_ARGUMENT for a name or key that is not
  // of the allowed characters; PERMISSION_DENIED for a key outside the prefix (the
  // tenant's, when callers authenticate); ALREADY_EXISTS for a name the tenant holds;
  // RESOURCE_EXHAUSTED past max_bytes or max_regions.
  absl::StatusOr<std::shared_ptr<SharedRegion>> Register(const std::string& tenant,
                                                         const std::string& name,
                                                         const std::string& key,
                                                         int64_t offset, int64_t bytes);
  // NOT_FOUND when the tenant has no region of that name. Calls using it fail when they
  // finish (SharedRegion::CheckIntact); its mapping goes once the last one has.
  absl::Status Unregister(const std::string& tenant, absl::string_view name);
  // The tenant's region `name`, or NOT_FOUND (also FAILED_PRECONDITION with --shm=off).
  absl::StatusOr<std::shared_ptr<SharedRegion>> Find(const std::string& tenant,
                                                     absl::string_view name) const;
  // The tenant's regions, by name.
  std::vector<std::shared_ptr<SharedRegion>> List(const std::string& tenant) const;
  // Bytes of all tenants' regions.
  int64_t bytes() const;
  // Unregisters every region (the server stopping).
  void Clear();

 private:
  absl::Status CheckKey(const std::string& tenant, const std::string& key) const;
  void Publish() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RegionSettings settings_;
  ServerMetrics* const metrics_;
  mutable absl::Mutex mu_;
  // (tenant, name) -> region
  std::map<std::pair<std::string, std::string>, std::shared_ptr<SharedRegion>, std::less<>>
      regions_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// "The server runs with --shm=off" (FAILED_PRECONDITION), for every region RPC and slice.
absl::Status RegionsOff();

}  // namespace gemmd

#endif  // GEMMD_SERVER_REGIONS_REGION_TABLE_H_
