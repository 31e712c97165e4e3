// A callback-API call refused at its headers (UNAUTHENTICATED, say): finished with its
// status without reading a byte of it. `Reactor` is the method's reactor type
// (grpc::ServerBidiReactor<...>, grpc::ServerReadReactor<...>).
#ifndef GEMMD_SERVER_RPC_REFUSED_CALL_H_
#define GEMMD_SERVER_RPC_REFUSED_CALL_H_

#include <grpcpp/support/server_callback.h>

#include "absl/status/status.h"
#include "server/rpc/grpc_status.h"

namespace gemmd {

template <typename Reactor>
Reactor* RefusedCall(const absl::Status& status) {
  class Refused final : public Reactor {
   public:
    explicit Refused(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
    void OnDone() override { delete this; }
  };
  return new Refused(status);
}

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_REFUSED_CALL_H_
