// The GemmService calls in progress, so shutdown can drain them. One rule for every
// method: a call whose headers arrived before draining started is served to its end
// (its request still uploading included); one that arrives after is refused UNAVAILABLE
// ("server is shutting down"), which clients retry elsewhere, unless it continues a
// call of several RPCs begun before (`continues`: call_continuation.h). Streams and
// calls that outlive their handler (GEMMs, uploads, downloads) register; the quick unary
// methods only ask draining(). Thread-safe.
#ifndef GEMMD_SERVER_RPC_CALL_REGISTRY_H_
#define GEMMD_SERVER_RPC_CALL_REGISTRY_H_

#include <cstddef>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gemmd {

class CallRegistry {
 public:
  // UNAVAILABLE once draining has started (the call is then not registered), unless
  // the call `continues` one begun before. `on_draining` (a stream that would otherwise
  // wait for its client) runs once when draining starts while the call is registered,
  // under the registry's lock: it must not call into the registry.
  absl::Status Enter(const void* call, bool continues = false,
                     std::function<void()> on_draining = nullptr);
  void Leave(const void* call);
  // UNAVAILABLE once draining has started, for a call that does not register, unless it
  // `continues` one begun before; a refusal counts for AwaitQuiet.
  absl::Status CheckOpen(bool continues = false);

  void StartDraining();
  bool draining() const;
  size_t size() const;
  // True once no call is registered; false when `deadline` passed first.
  bool AwaitEmpty(absl::Time deadline);
  // True once `quiet` has passed since draining started and since the last call it
  // refused (clients have heard and stopped); false when `deadline` passed first.
  bool AwaitQuiet(absl::Duration quiet, absl::Time deadline);

 private:
  absl::Status RefuseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<const void*, std::function<void()>> calls_ ABSL_GUARDED_BY(mu_);
  absl::Time last_refused_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_CALL_REGISTRY_H_
