// A call of one of the small unary methods (GetServerInfo, DeleteTensor, ListTensors, the
// region methods, health's Check): its one request read, served on the queue's poller
// (none of them waits: no GEMM, no large copy), answered.
#ifndef GEMMD_SERVER_RPC_UNARY_CALL_H_
#define GEMMD_SERVER_RPC_UNARY_CALL_H_

#include <grpcpp/support/byte_buffer.h>

#include <functional>

#include "absl/status/status.h"
#include "server/rpc/queued_call.h"

namespace gemmd {

class UnaryCall final : public QueuedReactor {
 public:
  // Serves the request read: the response when OK. Counting and logging the call are
  // its own.
  using Serve =
      std::function<absl::Status(const grpc::ServerContextBase& context,
                                 const grpc::ByteBuffer& request, grpc::ByteBuffer* response)>;

  // `request_type` is named in the error for a call that carried no request; `serve`
  // outlives the call.
  UnaryCall(QueuedCall* call, const char* request_type, const Serve* serve);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  ~UnaryCall() override = default;

  const char* const request_type_;
  const Serve* const serve_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_UNARY_CALL_H_
