// Host memory per tenant (--tenant_max_inflight_bytes): what one tenant's Matmul and
// QuantizedMatmul calls hold at once, their received requests and their results until
// answered, so one tenant cannot take the whole of --max_inflight_bytes from the others.
// Only named tenants are charged (authentication on). Thread-safe.
#ifndef GEMMD_SERVER_RPC_TENANT_BUDGET_H_
#define GEMMD_SERVER_RPC_TENANT_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace gemmd {

class TenantBudget {
 public:
  explicit TenantBudget(int64_t cap_bytes) : cap_(cap_bytes) {}  // 0: no cap

  // RESOURCE_EXHAUSTED naming the tenant and the flag when its calls already hold the cap
  // (a new call is refused at its headers then).
  absl::Status CheckRoom(const std::string& tenant) const;
  // Charges `bytes` to `tenant`; RESOURCE_EXHAUSTED (nothing charged) when that would
  // pass the cap.
  absl::Status Charge(const std::string& tenant, int64_t bytes);
  void Release(const std::string& tenant, int64_t bytes);
  int64_t held(const std::string& tenant) const;

 private:
  absl::Status Exhausted(const std::string& tenant, int64_t held, int64_t asked) const;
  const int64_t cap_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENANT_BUDGET_H_
