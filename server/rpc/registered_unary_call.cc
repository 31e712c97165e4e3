#include "server/rpc/registered_unary_call.h"

#include "server/rpc/grpc_status.h"

namespace gemmd {

void RegisteredUnaryCall::Await(const Method* method, grpc::ServerCompletionQueue* queue) {
  RegisteredUnaryCall* call = new RegisteredUnaryCall(method, queue);
  method->request(&call->context_, &call->request_, &call->responder_, queue, call);
}

void RegisteredUnaryCall::Proceed(bool ok) {
  if (answered_ || !ok) {  // answered; or the server is shutting down and no call came
    delete this;
    return;
  }
  Await(method_, queue_);  // the next call on this queue
  answered_ = true;
  const absl::Status status = method_->serve(context_, request_, &response_);
  request_.Clear();
  if (status.ok()) {
    responder_.Finish(response_, grpc::Status::OK, this);
  } else {
    responder_.FinishWithError(ToGrpcStatus(status), this);
  }
}

}  // namespace gemmd
