// One PutTensor call: a client stream of TensorChunks into the tensor store, on gRPC's
// callback API with raw bytes (the generic service), so each chunk's data goes from the
// received slices straight into the tensor's memory (one copy; on a GPU, one copy to
// the device) instead of through a parsed message.
//
// The first chunk's header says what the tensor is; the store admits it (cap checked,
// memory taken) before any data is read. Then data and scales are appended in order, at
// most 4 MiB per chunk; when the client closes its side every byte must have come, and
// the tensor joins the store. Any error ends the call with its status, and an unfinished
// upload (error, cancel, disconnect) leaves nothing in the store. A header with parts >= 2
// opens a tensor for parallel parts and answers its handle; a header with part_of
// uploads one part. One read at a time: a slow store slows the sender (flow control).
//
// Owns itself: created by the service per call, deleted when gRPC reports it done.
#ifndef GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_
#define GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "server/observability/metrics.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// Data plus scales one TensorChunk may carry.
inline constexpr int64_t kMaxTensorChunkBytes = int64_t{4} << 20;

// gemm.v1.TensorHeader to a TensorSpec: INVALID_ARGUMENT for a header that is neither
// dense nor quantized (or both), or a dtype / format the GEMMs do not take.
absl::StatusOr<TensorSpec> SpecFromHeader(const gemm::v1::TensorHeader& header);

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
  absl::Status BeginFrom(const gemm::v1::TensorHeader& header);
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
  int64_t chunks_ = 0;
  std::unique_ptr<TensorStore::Upload> upload_;
  std::string opened_;  // the handle of a tensor opened for parts
  absl::StatusCode code_ = absl::StatusCode::kOk;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_
