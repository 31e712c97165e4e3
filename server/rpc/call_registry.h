// The GEMM calls the server has taken and not yet finished, so shutdown can drain them:
// once draining starts, new calls are refused (UNAVAILABLE) and every registered call
// hears about it (a call still receiving its request is then answered UNAVAILABLE; one
// whose request arrived completes). Thread-safe.
#ifndef GEMMD_SERVER_RPC_CALL_REGISTRY_H_
#define GEMMD_SERVER_RPC_CALL_REGISTRY_H_

#include <cstddef>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gemmd {

class CallRegistry {
 public:
  class Member {
   public:
    // Runs once, under the registry's lock, when draining starts: it must not call back
    // into the registry.
    virtual void OnDraining(const absl::Status& status) = 0;

   protected:
    ~Member() = default;
  };

  // UNAVAILABLE ("server is shutting down") once draining has started; the call is then
  // not registered.
  absl::Status Enter(Member* call);
  // Waits for a drain in progress to be done with `call`, so it may be destroyed after.
  void Leave(Member* call);

  void StartDraining();
  bool draining() const;
  size_t size() const;
  // True once no call is registered; false when `deadline` passed first.
  bool AwaitEmpty(absl::Time deadline);
  // True once `quiet` has passed since draining started and since the last call it
  // refused (clients have heard and stopped); false when `deadline` passed first.
  bool AwaitQuiet(absl::Duration quiet, absl::Time deadline);

 private:
  mutable absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<Member*> calls_ ABSL_GUARDED_BY(mu_);
  absl::Time last_refused_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_CALL_REGISTRY_H_
