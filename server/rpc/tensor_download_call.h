// One GetTensor call: a resident tensor, or a range of its rows, streamed back as
// TensorChunks (the header, then the data, then the scales, at most 2 MiB each: a
// default client takes them), one chunk at a time as gRPC takes the previous one. The
// tensor stays pinned until the call ends, so a delete meanwhile does not cut the stream
// short.
//
// What a download holds while its client is slow, or never reads: the chunk gRPC is
// sending, never a second serialized copy of it (chunks go out as slices, like a Matmul's
// C). Where resident memory is host memory (the CPU backend) the slice is the tensor's
// own memory, so a download takes no memory of its own. Otherwise (a GPU) each chunk is
// copied into a pooled host buffer (page-locked: one DMA), the next one while gRPC sends
// the one before, so copying and sending overlap. A download reserves two chunks' worth
// when it starts, under --max_inflight_bytes and the tenant's
// --tenant_max_inflight_bytes (the chunk gRPC sends and the next); a download that finds
// no room is refused RESOURCE_EXHAUSTED before it starts.
//
// Counted in gemm_inflight_requests while it runs; served to its end by a drain that
// starts after it did. Owns itself.
#ifndef GEMMD_SERVER_RPC_TENSOR_DOWNLOAD_CALL_H_
#define GEMMD_SERVER_RPC_TENSOR_DOWNLOAD_CALL_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "server/rpc/queued_call.h"
#include "server/rpc/tensor_call_environment.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// The header GetTensor and ListTensors report for a tensor.
gemm::v1::TensorHeader HeaderOf(const TensorSpec& spec, absl::Time expires,
                                const std::string& label, absl::Time now);

// Data and scales of one chunk of a download.
inline constexpr int64_t kDownloadChunkBytes = int64_t{2} << 20;

// The bytes a download of rows [row_begin, row_end) sends: offsets into the tensor's data
// and scales, and how many of each.
struct DownloadRange {
  int64_t data_begin = 0, data_bytes = 0;
  int64_t scale_begin = 0, scale_bytes = 0;
  int64_t bytes() const { return data_bytes + scale_bytes; }
};
// For a valid spec: rows [row_begin, row_end) of its Rows() (both 0: all of them), or
// OUT_OF_RANGE for a range that is empty or not within them.
absl::StatusOr<DownloadRange> RangeOf(const TensorSpec& spec, int64_t row_begin,
                                      int64_t row_end);

class TensorDownloadCall final : public QueuedReactor {
 public:
  // Reads the call's request (a GetTensorRequest), then streams the tensor (or rows) it
  // names, for `tenant`, or answers why not: INVALID_ARGUMENT (not a GetTensorRequest,
  // or none), UNAVAILABLE (draining; the tensor's device faulted), NOT_FOUND,
  // FAILED_PRECONDITION (no store; still uploading), OUT_OF_RANGE (rows not in the
  // tensor), RESOURCE_EXHAUSTED (no room for its chunks).
  TensorDownloadCall(const TensorCallEnvironment* env, QueuedCall* call, std::string tenant);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

  class Room;  // the host memory the chunks take (copying downloads)

 private:
  ~TensorDownloadCall() override = default;
  absl::Status Start(const grpc::ByteBuffer& request);
  // Writes the next chunk (the one prefetched, when there is one), or finishes when all
  // went; then prefetches the one after.
  void Next();
  // The next chunk's message, or none when all went (advances what was sent).
  absl::StatusOr<std::optional<grpc::ByteBuffer>> MakeChunk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Prefetch();
  // `n` canonical bytes at `offset` of the data (or scales) as a slice: the tensor's memory
  // itself, or a copy (ReadCanonical).
  absl::StatusOr<grpc::Slice> ChunkSlice(bool scales, int64_t offset, size_t n);
  void FinishWithStatus(const absl::Status& status);

  const TensorCallEnvironment* const env_;
  grpc::GenericServerContext* const context_;
  const std::string tenant_;
  const absl::Time started_;
  bool registered_ = false;
  TensorPin pin_;
  DownloadRange range_;
  std::shared_ptr<Room> room_;  // null when the chunks are the tensor's own memory
  grpc::ByteBuffer request_;
  grpc::ByteBuffer chunk_;  // the chunk gRPC is sending
  // The chunk after it, read while that one is sent; taken by Next. Held while a
  // prefetch runs, so a write that completes meanwhile waits for it.
  absl::Mutex mu_;
  std::optional<absl::StatusOr<std::optional<grpc::ByteBuffer>>> next_ ABSL_GUARDED_BY(mu_);
  int64_t data_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t scales_sent_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_;  // what the call was finished with
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_DOWNLOAD_CALL_H_
