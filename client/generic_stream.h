// One streaming call of a gemm.v1 method, made blocking on a completion queue of its own,
// with messages as raw bytes: what PutTensor (client streaming) and GetTensor (server
// streaming) are made of. On the wire a generic stream is an ordinary HTTP/2 gRPC stream,
// so it serves either kind of call.
//
// Why not the generated stub: its writer serializes each TensorChunk, copying the
// tensor's bytes into the message; Write here sends an EncodedMessage whose payloads are
// slices referencing the caller's memory. That memory must stay valid until the stream
// is destroyed: the destructor waits until gRPC has let go of every such slice.
// Thread-compatible: one thread drives a stream.
#ifndef GEMMD_CLIENT_GENERIC_STREAM_H_
#define GEMMD_CLIENT_GENERIC_STREAM_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/call_metadata.h"
#include "proto/wire/gemm_wire.h"

namespace gemmd {

class GenericStream {
 public:
  // Starts a call of `method` ("/gemm.v1.GemmService/PutTensor") that must end within
  // `timeout`; `continues` (when not empty): the handle it sends as gemmd-continues (a
  // temporary of the call of several RPCs it belongs to).
  GenericStream(std::shared_ptr<grpc::ChannelInterface> channel, const std::string& method,
                absl::Duration timeout, const std::string& continues = "");
  // Cancels the call if it was not finished, and waits until gRPC has released every
  // payload written.
  ~GenericStream();
  GenericStream(const GenericStream&) = delete;
  GenericStream& operator=(const GenericStream&) = delete;

  // Each returns false when the stream is broken (the server ended the call, the deadline
  // passed, the connection failed): Finish then says why.
  bool Write(const wire::EncodedMessage& message);
  bool WritesDone();
  bool Read(grpc::ByteBuffer* message);
  // The call's status, as the server sent it (once; after the last Read).
  absl::Status Finish();

 private:
  bool Await(void* tag);
  static void ReleasePayload(void* stream);

  const std::shared_ptr<grpc::ChannelInterface> channel_;  // outlives the call
  std::optional<grpc::ClientContext> context_;  // reset before waiting for the payloads
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
  absl::Mutex mu_;
  int payloads_held_ ABSL_GUARDED_BY(mu_) = 0;  // payload slices gRPC still references
};

// The bytes of a received message, in order, as views into `buffer`'s slices (which
// `slices` keeps alive). False when gRPC cannot read the buffer.
bool DumpMessage(grpc::ByteBuffer* buffer, std::vector<grpc::Slice>* slices,
                 wire::ByteRuns* runs);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_GENERIC_STREAM_H_
