// A unary method registered with gRPC by its service (not left to the generic service),
// served raw on the call queues: what makes server reflection list the service, since
// gRPC lists a service only for a method it has registered. gemmd registers one method
// of each of its services this way (GetServerInfo, health's Check); the rest go through
// the generic service (queued_call.h).
//
// Owns itself: made waiting for the method's next call on one queue, deleted once that
// call is answered (or, at shutdown, when the wait is called off).
#ifndef GEMMD_SERVER_RPC_REGISTERED_UNARY_CALL_H_
#define GEMMD_SERVER_RPC_REGISTERED_UNARY_CALL_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/byte_buffer.h>

#include <functional>

#include "server/rpc/queued_call.h"
#include "server/rpc/unary_call.h"

namespace gemmd {

class RegisteredUnaryCall final : public QueueTag {
 public:
  struct Method {
    // Asks gRPC for the method's next call (the generated RequestX of its raw service).
    std::function<void(grpc::ServerContext*, grpc::ByteBuffer*,
                       grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>*,
                       grpc::ServerCompletionQueue*, void*)>
        request;
    UnaryCall::Serve serve;
  };

  // Waits for `method`'s next call on `queue`; `method` outlives the queue.
  static void Await(const Method* method, grpc::ServerCompletionQueue* queue);

  void Proceed(bool ok) override;

 private:
  RegisteredUnaryCall(const Method* method, grpc::ServerCompletionQueue* queue)
      : method_(method), queue_(queue) {}
  ~RegisteredUnaryCall() = default;

  const Method* const method_;
  grpc::ServerCompletionQueue* const queue_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_{&context_};
  bool answered_ = false;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_REGISTERED_UNARY_CALL_H_
