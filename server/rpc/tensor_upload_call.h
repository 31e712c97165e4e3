// One PutTensor call: a client stream of TensorChunks into the tensor store, on gRPC's
// callback API with raw bytes (the generic service), so each chunk's data goes from the
// received slices straight into the tensor's memory (one copy; on a GPU, one copy to
// the device) instead of through a parsed message.
//
// The chunks go to a TensorChunkSequence (the protocol: header first, data and scales
// in order, every byte by the end); any error ends the call with its status, and an
// unfinished upload (error, cancel, disconnect) leaves nothing in the store. One read at
// a time: a slow store slows the sender (flow control).
//
// Owns itself: created by the service per call, deleted when gRPC reports it done.
#ifndef GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_
#define GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/observability/metrics.h"
#include "server/rpc/tensor_chunk_sequence.h"
#include "server/store/tensor_store.h"

namespace gemmd {

class TensorUploadCall final : public grpc::ServerGenericBidiReactor {
 public:
  // `tenant`: the caller's; the tensor is stored as theirs.
  TensorUploadCall(TensorStore* store, ServerMetrics* metrics,
                   grpc::GenericCallbackServerContext* context, std::string tenant = "");

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  ~TensorUploadCall() override = default;

  // One received chunk.
  absl::Status Consume();
  // The client closed its side: the tensor is complete or the call fails.
  absl::Status Complete();
  void End(const absl::Status& status);

  TensorStore* const store_;
  ServerMetrics* const metrics_;
  grpc::GenericCallbackServerContext* const context_;
  const std::string tenant_;
  const absl::Time started_;
  grpc::ByteBuffer chunk_;
  grpc::ByteBuffer response_;
  TensorChunkSequence sequence_;
  absl::StatusCode code_ = absl::StatusCode::kOk;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_
