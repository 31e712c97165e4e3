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
  return method == RpcMethod::kMatmul ? "gemm.v1.MatmulRequest" : "gemm.v1.QuantizedMatmulRequest";
}

}  // namespace

GemmCall::GemmCall(const GemmCallSetup* setup, grpc::ServerCompletionQueue* queue)
    : setup_(setup), queue_(queue) {}

void GemmCall::Await(const GemmCallSetup* setup, grpc::ServerCompletionQueue* queue) {
  GemmCall* call = new GemmCall(setup, queue);
  // Before the call starts, as gRPC requires; the notice comes only for a call that did.
  call->context_.AsyncNotifyWhenDone(&call->over_);
  setup->service->RequestCall(&call->context_, &call->stream_, queue, queue, &call->started_);
}

void GemmCall::Proceed(void* tag, bool ok) {
  const Tag* t = static_cast<const Tag*>(tag);
  GemmCall* call = t->call;
  switch (t->kind) {
    case Tag::kStarted:
      if (!ok) {  // the server is shutting down: no call came, and none will
        delete call;
        return;
      }
      Await(call->setup_, call->queue_);  // the next call on this queue
      call->Started();
      return;
    case Tag::kRead:
      call->Read(ok);
      return;
    case Tag::kFinished:
    case Tag::kOver:
      call->LetGo();
      return;
  }
}

void GemmCall::Started() {
  static const std::string kMatmul = "/gemm.v1.GemmService/Matmul";
  static const std::string kQuantizedMatmul = "/gemm.v1.GemmService/QuantizedMatmul";
  const std::string& name = context_.method();
  if (name != kMatmul && name != kQuantizedMatmul) {
    // Every other method of the service has its own handler: this one is unknown.
    FinishWith(absl::UnimplementedError(absl::StrCat("unknown method ", ClientText(name))));
    return;
  }
  const RpcMethod method = name == kMatmul ? RpcMethod::kMatmul : RpcMethod::kQuantizedMatmul;
  absl::StatusOr<std::string> tenant = setup_->auth->TenantOf(context_, method);
  if (!tenant.ok()) {
    FinishWith(tenant.status());  // counted and logged by TenantOf
    return;
  }
  exchange_.emplace(setup_->env, method, *std::move(tenant));
  const absl::Status admitted = Admit();
  if (!admitted.ok()) {
    exchange_->LeaveArriving();  // at once: a refused call must not crowd out the next one
    FinishWith(admitted);
    return;
  }
  stream_.Read(&request_bytes_, &read_);
}

absl::Status GemmCall::Admit() {
  const GemmCallEnvironment* env = setup_->env;
  const bool continues = env->registry->draining() &&
                         ContinuesACall(context_, env->request.store, exchange_->tenant());
  if (absl::Status s = env->registry->Enter(this, continues); !s.ok()) return s;
  registered_ = true;
  return exchange_->Admit();
}

void GemmCall::FinishWith(const absl::Status& status) {
  status_ = status;
  stream_.Finish(ToGrpcStatus(status), &finished_);
}

void GemmCall::Read(bool ok) {
  exchange_->set_received(absl::Now());
  if (!ok) {
    // No message: the client went away, or half-closed without sending one.
    exchange_->LeaveArriving();
    FinishWith(context_.IsCancelled()
                   ? absl::CancelledError("the call ended before its request arrived")
                   : absl::InvalidArgumentError(
                         absl::StrCat("the call carried no request message; expected one ",
                                      RequestTypeName(exchange_->method()))));
    return;
  }
  const GemmCallEnvironment* env = setup_->env;
  const int64_t inline_max = env->prepare_inline_max_bytes;
  if (env->preparers != nullptr && inline_max >= 0 &&
      static_cast<int64_t>(request_bytes_.Length()) > inline_max) {
    // The call stays open (nothing has finished it) until Prepare answers or queues it.
    env->preparers->Schedule([this] { Prepare(); });
    return;
  }
  Prepare();
}

void GemmCall::Prepare() {
  absl::StatusOr<Received> received = TakeReceived(setup_->env->request, &request_bytes_);
  if (!received.ok()) {
    exchange_->LeaveArriving();
    FinishWith(received.status());
    return;
  }
  grpc::GenericServerContext* context = &context_;
  const absl::Status status = exchange_->Submit(
      *std::move(received), DeadlineOf(context_), [context] { return context->IsCancelled(); },
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
  stream_.WriteAndFinish(response_bytes_, grpc::WriteOptions(), grpc::Status::OK, &finished_);
}

void GemmCall::LetGo() {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (exchange_.has_value()) {
    exchange_->Settle(ClientOutcome(context_, status_, absl::Now()), context_.peer());
  }
  if (registered_) setup_->env->registry->Leave(this);
  delete this;
}

}  // namespace gemmd
