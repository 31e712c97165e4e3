#include "server/rpc/health_service.h"

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "server/observability/client_text.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/raw_messages.h"

namespace gemmd {
namespace {

grpc::ByteBuffer ResponseOf(HealthStatus::Serving serving) {
  grpc::health::v1::HealthCheckResponse response;
  response.set_status(static_cast<grpc::health::v1::HealthCheckResponse::ServingStatus>(serving));
  return SerializeToByteBuffer(response);
}

}  // namespace

HealthStatus::HealthStatus() { statuses_[""] = kServing; }

void HealthStatus::SetLocked(const std::string& service, Serving serving) {
  Serving& status = statuses_[service];
  if (status == serving) return;
  status = serving;
  if (auto it = watchers_.find(service); it != watchers_.end()) {
    for (Watcher* watcher : it->second) watcher->Notify(serving);
  }
}

void HealthStatus::Set(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  SetLocked(service, serving ? kServing : kNotServing);
}

void HealthStatus::SetEveryLocked(Serving serving) {
  // Only values change (no name is added), so the iteration stays valid.
  for (const auto& [name, status] : statuses_) SetLocked(name, serving);
}

void HealthStatus::SetAll(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  SetEveryLocked(serving ? kServing : kNotServing);
}

void HealthStatus::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  SetEveryLocked(kNotServing);
  shut_down_ = true;
  for (const auto& [name, watchers] : watchers_) {
    for (Watcher* watcher : watchers) watcher->End();
  }
}

HealthStatus::Serving HealthStatus::Get(const std::string& service) const {
  absl::MutexLock lock(&mu_);
  auto it = statuses_.find(service);
  return it == statuses_.end() ? kServiceUnknown : it->second;
}

void HealthStatus::Watch(const std::string& service, Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_[service].insert(watcher);
  auto it = statuses_.find(service);
  watcher->Notify(it == statuses_.end() ? kServiceUnknown : it->second);
  if (shut_down_) watcher->End();
}

void HealthStatus::Unwatch(const std::string& service, Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  auto it = watchers_.find(service);
  if (it == watchers_.end()) return;
  it->second.erase(watcher);
  if (it->second.empty()) watchers_.erase(it);
}

absl::Status ServeHealthCheck(const HealthStatus& health, const grpc::ByteBuffer& request,
                              grpc::ByteBuffer* response) {
  grpc::health::v1::HealthCheckRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  const HealthStatus::Serving serving = health.Get(parsed.service());
  if (serving == HealthStatus::kServiceUnknown) {
    return absl::NotFoundError(
        absl::StrCat("no health status for service '", ClientText(parsed.service()), "'"));
  }
  *response = ResponseOf(serving);
  return absl::OkStatus();
}

HealthWatchCall::HealthWatchCall(QueuedCall* call, HealthStatus* health)
    : QueuedReactor(call), health_(health) {
  StartRead(&request_);
}

void HealthWatchCall::OnReadDone(bool ok) {
  absl::Status refused;
  grpc::health::v1::HealthCheckRequest parsed;
  if (!ok) {
    refused = NoRequest("grpc.health.v1.HealthCheckRequest");
  } else {
    refused = ParseSmallRequest(request_, &parsed);
  }
  request_.Clear();
  if (!refused.ok()) {
    absl::MutexLock lock(&mu_);
    finishing_ = true;
    finish_status_ = refused;
    AdvanceLocked();
    return;
  }
  // Only the first message counts, as with gRPC's own service; the client's side stays
  // open without being read.
  service_ = parsed.service();
  watching_ = true;
  health_->Watch(service_, this);
}

void HealthWatchCall::Notify(HealthStatus::Serving serving) {
  absl::MutexLock lock(&mu_);
  latest_ = serving;
  AdvanceLocked();
}

void HealthWatchCall::End() {
  absl::MutexLock lock(&mu_);
  if (finishing_) return;
  finishing_ = true;
  finish_status_ = absl::UnavailableError("the server is shutting down");
  AdvanceLocked();
}

void HealthWatchCall::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  write_bytes_.Clear();
  if (!ok) {
    // The client has gone: nothing more can be sent.
    gone_ = true;
    if (!finishing_) {
      finishing_ = true;
      finish_status_ = absl::CancelledError("the client went away");
    }
  }
  AdvanceLocked();
}

void HealthWatchCall::OnCancel() {
  absl::MutexLock lock(&mu_);
  gone_ = true;
  if (finishing_) return;
  finishing_ = true;
  finish_status_ = absl::CancelledError("the client cancelled the watch");
  AdvanceLocked();
}

void HealthWatchCall::AdvanceLocked() {
  if (finished_ || writing_) return;
  // The latest status goes out first, a shutdown's NOT_SERVING included.
  if (!gone_ && latest_ != sent_) {
    sent_ = latest_;
    writing_ = true;
    write_bytes_ = ResponseOf(latest_);
    StartWrite(&write_bytes_);
    return;
  }
  if (finishing_) {
    finished_ = true;
    Finish(ToGrpcStatus(finish_status_));
  }
}

void HealthWatchCall::OnDone() {
  if (watching_) health_->Unwatch(service_, this);
  delete this;
}

}  // namespace gemmd
