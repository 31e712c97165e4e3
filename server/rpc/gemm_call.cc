#include "server/rpc/gemm_call.h"

#include <utility>

#include "absl/time/clock.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/request_phases.h"

namespace gemmd {
namespace {

const char* RequestTypeName(RpcMethod method) {
  return method == RpcMethod::kMatmul ? "gemm.v1.MatmulRequest" : "gemm.v1.QuantizedMatmulRequest";
}

}  // namespace

GemmCall::GemmCall(const GemmCallSetup* setup, QueuedCall* call, RpcMethod method)
    : QueuedReactor(call), setup_(setup) {
  absl::StatusOr<std::string> tenant = setup_->auth->TenantOf(context(), method);
  if (!tenant.ok()) {
    FinishWithStatus(tenant.status());  // counted and logged by TenantOf
    return;
  }
  exchange_.emplace(setup_->env, method, *std::move(tenant));
  const absl::Status admitted = Admit();
  if (!admitted.ok()) {
    exchange_->LeaveArriving();  // at once: a refused call must not crowd out the next one
    FinishWithStatus(admitted);
    return;
  }
  StartRead(&request_bytes_);
}

absl::Status GemmCall::Admit() {
  const GemmCallEnvironment* env = setup_->env;
  const bool continues = env->registry->draining() &&
                         ContinuesACall(context(), env->request.store, exchange_->tenant());
  if (absl::Status s = env->registry->Enter(this, continues); !s.ok()) return s;
  registered_ = true;
  return exchange_->Admit();
}

void GemmCall::FinishWithStatus(const absl::Status& status) {
  status_ = status;
  Finish(ToGrpcStatus(status));
}

void GemmCall::OnReadDone(bool ok) {
  exchange_->set_received(absl::Now());
  if (!ok) {
    exchange_->LeaveArriving();
    FinishWithStatus(NoRequest(RequestTypeName(exchange_->method())));
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
    FinishWithStatus(received.status());
    return;
  }
  grpc::GenericServerContext* context = &this->context();
  const absl::Status status = exchange_->Submit(
      *std::move(received), DeadlineOf(*context), [context] { return context->IsCancelled(); },
      [this](const absl::Status& status, grpc::ByteBuffer response) {
        Answer(status, std::move(response));
      });
  if (!status.ok()) FinishWithStatus(status);  // queued: the job's end answers it
}

void GemmCall::Answer(const absl::Status& status, grpc::ByteBuffer response) {
  if (!status.ok()) {
    FinishWithStatus(status);
    return;
  }
  status_ = status;
  response_bytes_ = std::move(response);
  FinishWith(&response_bytes_, grpc::Status::OK);
}

void GemmCall::OnDone() {
  if (exchange_.has_value()) {
    exchange_->Settle(ClientOutcome(context(), status_, absl::Now()), context().peer());
  }
  if (registered_) setup_->env->registry->Leave(this);
  delete this;
}

}  // namespace gemmd
