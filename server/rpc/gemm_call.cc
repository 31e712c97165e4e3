#include "server/rpc/gemm_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/observability/client_text.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/request_phases.h"

namespace gemmd {
namespace {

const char* RequestTypeName(RpcMethod method) {
  return method == RpcMethod::kMatmul ? "gemm.v1.MatmulRequest"
                                      : "gemm.v1.QuantizedMatmulRequest";
}

}  // namespace

GemmCall::GemmCall(const GemmCallEnvironment* env, grpc::GenericCallbackServerContext* context,
                   RpcMethod method, std::string tenant)
    : env_(env), context_(context), method_(method), exchange_(env, method, std::move(tenant)) {
  const absl::Status admitted = Admit();
  if (admitted.ok()) {
    StartRead(&request_bytes_);
  } else {
    exchange_.LeaveArriving();  // at once: a refused call must not crowd out the next one
    FinishWith(admitted);
  }
}

absl::Status GemmCall::Admit() {
  const bool continues = env_->registry->draining() &&
                         ContinuesACall(*context_, env_->request.store, exchange_.tenant());
  if (absl::Status s = env_->registry->Enter(this, continues); !s.ok()) return s;
  registered_ = true;
  return exchange_.Admit();
}

void GemmCall::FinishWith(const absl::Status& status) {
  status_ = status;
  Finish(ToGrpcStatus(status));
}

void GemmCall::OnReadDone(bool ok) {
  exchange_.set_received(absl::Now());
  if (!ok) {
    // No message: the client went away, or half-closed without sending one.
    exchange_.LeaveArriving();
    FinishWith(context_->IsCancelled()
                   ? absl::CancelledError("the call ended before its request arrived")
                   : absl::InvalidArgumentError(absl::StrCat(
                         "the call carried no request message; expected one ",
                         RequestTypeName(method_))));
    return;
  }
  const int64_t inline_max = env_->prepare_inline_max_bytes;
  if (env_->preparers != nullptr && inline_max >= 0 &&
      static_cast<int64_t>(request_bytes_.Length()) > inline_max) {
    // The call stays open (nothing has finished it) until Prepare answers or queues it.
    env_->preparers->Schedule([this] { Prepare(); });
    return;
  }
  Prepare();
}

void GemmCall::Prepare() {
  absl::StatusOr<Received> received = TakeReceived(env_->request, &request_bytes_);
  if (!received.ok()) {
    exchange_.LeaveArriving();
    FinishWith(received.status());
    return;
  }
  grpc::GenericCallbackServerContext* context = context_;
  const absl::Status status = exchange_.Submit(
      *std::move(received), DeadlineOf(*context_), [context] { return context->IsCancelled(); },
      [this](const absl::Status& status, grpc::ByteBuffer response) {
        Answer(status, std::move(response));
      });
  if (!status.ok()) FinishWith(status);  // queued: the job's end answers it
}

void GemmCall::Answer(const absl::Status& status, grpc::ByteBuffer response) {
  if (!status.ok()) {
    FinishWith(status);
    return;
  }
  status_ = status;
  response_bytes_ = std::move(response);
  StartWriteAndFinish(&response_bytes_, grpc::WriteOptions(), grpc::Status::OK);
}

void GemmCall::OnDone() {
  exchange_.Settle(ClientOutcome(*context_, status_, absl::Now()), context_->peer());
  if (registered_) env_->registry->Leave(this);
  delete this;
}

grpc::ServerGenericBidiReactor* UnimplementedCall(grpc::GenericCallbackServerContext* context) {
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const std::string& method) {
      Finish(ToGrpcStatus(
          absl::UnimplementedError(absl::StrCat("unknown method ", ClientText(method)))));
    }
    void OnDone() override { delete this; }
  };
  return new Reactor(context->method());
}

grpc::ServerGenericBidiReactor* RefusedCall(const absl::Status& status) {
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
    void OnDone() override { delete this; }
  };
  return new Reactor(status);
}

}  // namespace gemmd
