// A call refused at its headers (UNAUTHENTICATED, UNIMPLEMENTED, say): finished with its
// status without reading a byte of it.
#ifndef GEMMD_SERVER_RPC_REFUSED_CALL_H_
#define GEMMD_SERVER_RPC_REFUSED_CALL_H_

#include "absl/status/status.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/queued_call.h"

namespace gemmd {

class RefusedCall final : public QueuedReactor {
 public:
  RefusedCall(QueuedCall* call, const absl::Status& status) : QueuedReactor(call) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }

 private:
  ~RefusedCall() override = default;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_REFUSED_CALL_H_
