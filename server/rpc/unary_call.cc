#include "server/rpc/unary_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rpc/grpc_status.h"

namespace gemmd {

UnaryCall::UnaryCall(QueuedCall* call, const char* request_type, Serve serve)
    : QueuedReactor(call), request_type_(request_type), serve_(std::move(serve)) {
  StartRead(&request_);
}

void UnaryCall::OnReadDone(bool ok) {
  if (!ok) {
    // No message: the client went away, or half-closed without sending one.
    Finish(ToGrpcStatus(
        context().IsCancelled()
            ? absl::CancelledError("the call ended before its request arrived")
            : absl::InvalidArgumentError(absl::StrCat(
                  "the call carried no request message; expected one ", request_type_))));
    return;
  }
  const absl::Status status = serve_(context(), request_, &response_);
  request_.Clear();
  if (status.ok()) {
    FinishWith(&response_, grpc::Status::OK);
  } else {
    Finish(ToGrpcStatus(status));
  }
}

}  // namespace gemmd
