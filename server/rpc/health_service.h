// grpc.health.v1.Health on the completion queues (queued_call.h), with the behaviour of
// gRPC's default health service: the server ("") and each service named serve or not;
// Check answers a name's status (NOT_FOUND for a name never set), Watch sends it at once
// and again at each change (SERVICE_UNKNOWN for a name never set), until the client
// leaves or the server shuts down. gRPC's own is a callback service, and one callback
// method brings gRPC's callback threads to the whole server (queued_call.h says what they
// cost). No token is asked for: probes carry none.
#ifndef GEMMD_SERVER_RPC_HEALTH_SERVICE_H_
#define GEMMD_SERVER_RPC_HEALTH_SERVICE_H_

#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/queued_call.h"

namespace gemmd {

inline constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";
inline constexpr char kHealthWatchMethod[] = "/grpc.health.v1.Health/Watch";

// The statuses, and the watches to tell of a change. Thread-safe.
class HealthStatus {
 public:
  // grpc.health.v1.HealthCheckResponse.ServingStatus.
  enum Serving { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

  class Watcher {
   public:
    // `service`'s status is now `serving` (called under the table's lock: never call
    // back into it from here).
    virtual void Notify(Serving serving) = 0;
    // The server shuts down: end the watch.
    virtual void End() = 0;

   protected:
    ~Watcher() = default;
  };

  // The server ("") serves from the start, as with gRPC's default service.
  HealthStatus();

  void Set(const std::string& service, bool serving);
  // Every name set so far.
  void SetAll(bool serving);
  // Everything NOT_SERVING from now on, whatever is set later; every watch ends.
  void Shutdown();

  // kServiceUnknown for a name never set.
  Serving Get(const std::string& service) const;

  // `watcher` hears `service`'s status now and at each change, until Unwatch (after
  // which it is never called again). A watch added after Shutdown ends at once.
  void Watch(const std::string& service, Watcher* watcher);
  void Unwatch(const std::string& service, Watcher* watcher);

 private:
  void SetLocked(const std::string& service, Serving serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetEveryLocked(Serving serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, Serving> statuses_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<Watcher*>> watchers_ ABSL_GUARDED_BY(mu_);
};

// Check: the HealthCheckResponse for `request` (a HealthCheckRequest).
absl::Status ServeHealthCheck(const HealthStatus& health, const grpc::ByteBuffer& request,
                              grpc::ByteBuffer* response);

// One Watch call. Owns itself.
class HealthWatchCall final : public QueuedReactor, public HealthStatus::Watcher {
 public:
  HealthWatchCall(QueuedCall* call, HealthStatus* health);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  void Notify(HealthStatus::Serving serving) override;
  void End() override;

 private:
  ~HealthWatchCall() override = default;

  // Starts what the state allows: the latest status's write, or the finish once it is
  // sent.
  void AdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HealthStatus* const health_;
  grpc::ByteBuffer request_;
  std::string service_;
  bool watching_ = false;  // written by OnReadDone, read by OnDone (the same thread)

  absl::Mutex mu_;
  grpc::ByteBuffer write_bytes_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // The status last notified, and the one last sent: kUnknown (which the table never
  // holds) until the first of each.
  HealthStatus::Serving latest_ ABSL_GUARDED_BY(mu_) = HealthStatus::kUnknown;
  HealthStatus::Serving sent_ ABSL_GUARDED_BY(mu_) = HealthStatus::kUnknown;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;  // the client: nothing more can be sent
  // To finish once nothing is left to send.
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_HEALTH_SERVICE_H_
