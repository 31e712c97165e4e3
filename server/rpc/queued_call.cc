#include "server/rpc/queued_call.h"

#include "absl/strings/str_cat.h"

namespace gemmd {

QueuedReactor::QueuedReactor(QueuedCall* call) : call_(call) { call->reactor_ = this; }

grpc::GenericServerContext& QueuedReactor::context() const { return call_->context_; }

absl::Status QueuedReactor::NoRequest(absl::string_view request_type) const {
  if (call_->context_.IsCancelled()) {
    return absl::CancelledError("the call ended before its request arrived");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the call carried no request message; expected one ", request_type));
}

void QueuedReactor::StartRead(grpc::ByteBuffer* message) {
  call_->holds_.fetch_add(1, std::memory_order_relaxed);
  call_->stream_.Read(message, &call_->read_);
}

void QueuedReactor::StartWrite(const grpc::ByteBuffer* message, grpc::WriteOptions options) {
  call_->holds_.fetch_add(1, std::memory_order_relaxed);
  call_->stream_.Write(*message, options, &call_->written_);
}

void QueuedReactor::Finish(const grpc::Status& status) {
  call_->stream_.Finish(status, &call_->finished_);
}

void QueuedReactor::FinishWith(const grpc::ByteBuffer* message, const grpc::Status& status) {
  call_->stream_.WriteAndFinish(*message, grpc::WriteOptions(), status, &call_->finished_);
}

void QueuedCall::Await(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* queue,
                       CallRouter* router) {
  QueuedCall* call = new QueuedCall(service, queue, router);
  // Before the call starts, as gRPC requires; the notice comes only for a call that did.
  call->context_.AsyncNotifyWhenDone(&call->over_);
  service->RequestCall(&call->context_, &call->stream_, queue, queue, &call->started_);
}

void QueuedCall::Proceed(Tag::Kind kind, bool ok) {
  switch (kind) {
    case Tag::kStarted:
      if (!ok) {  // the server is shutting down: no call came, and none will
        delete this;
        return;
      }
      Await(service_, queue_, router_);  // the next call on this queue
      router_->Route(this);
      return;
    case Tag::kRead:
      reactor_->OnReadDone(ok);
      Release();
      return;
    case Tag::kWritten:
      reactor_->OnWriteDone(ok);
      Release();
      return;
    case Tag::kOver:
      if (context_.IsCancelled()) reactor_->OnCancel();
      Release();
      return;
    case Tag::kFinished:
      Release();
      return;
  }
}

void QueuedCall::Release() {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  reactor_->OnDone();
  delete this;
}

}  // namespace gemmd
