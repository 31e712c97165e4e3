#include "server/rpc/unary_call.h"

#include "server/rpc/grpc_status.h"

namespace gemmd {

UnaryCall::UnaryCall(QueuedCall* call, const char* request_type, const Serve* serve)
    : QueuedReactor(call), request_type_(request_type), serve_(serve) {
  StartRead(&request_);
}

void UnaryCall::OnReadDone(bool ok) {
  if (!ok) {
    Finish(ToGrpcStatus(NoRequest(request_type_)));
    return;
  }
  const absl::Status status = (*serve_)(context(), request_, &response_);
  request_.Clear();
  if (status.ok()) {
    FinishWith(&response_, grpc::Status::OK);
  } else {
    Finish(ToGrpcStatus(status));
  }
}

}  // namespace gemmd
