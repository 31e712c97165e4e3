// One PutTensor call: a client stream of TensorChunks into the tensor store, on gRPC's
// completion queues with raw bytes (queued_call.h), so each chunk's data goes from the
// received slices straight into the tensor's memory (one copy; on a GPU, one copy to
// the device) instead of through a parsed message.
//
// The chunks go to a TensorChunkSequence (the protocol: header first, data and scales
// in order, every byte by the end); any error ends the call with its status, and an
// unfinished upload (error, cancel, disconnect, or nothing sent for
// --upload_idle_timeout_s: UploadWatch) leaves nothing in the store, its room freed at
// once and `tensor_upload_aborted` logged; so is a stored tensor whose client never got
// its handle. One read at a time: a slow store slows the
// sender (flow control). A drain that starts after its headers arrived lets it finish.
//
// Owns itself: created by the service per call, deleted when gRPC reports it done and
// the idle watch has let go of it.
#ifndef GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_
#define GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_

#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/rpc/queued_call.h"
#include "server/rpc/tensor_call_environment.h"
#include "server/rpc/tensor_chunk_sequence.h"
#include "server/rpc/upload_watch.h"

namespace gemmd {

class TensorUploadCall final : public QueuedReactor, public UploadWatch::Upload {
 public:
  // `tenant`: the caller's; the tensor is stored as theirs.
  TensorUploadCall(const TensorCallEnvironment* env, QueuedCall* call, std::string tenant);

  void OnReadDone(bool ok) override;
  void OnDone() override;

  // UploadWatch::Upload
  absl::Time last_activity() const override;
  void EndIdle(absl::Duration idle) override;
  void Ref() override { refs_.fetch_add(1); }
  void Unref() override;

 private:
  ~TensorUploadCall() override = default;

  // One received chunk.
  absl::Status Consume() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The client closed its side: the tensor is complete or the call fails.
  absl::Status Complete() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call with `status` unless it has ended already; an unfinished upload is
  // dropped first. Finish itself is called after the lock is released.
  bool EndLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendEnd();

  const TensorCallEnvironment* const env_;
  grpc::GenericServerContext* const context_;
  const std::string tenant_;
  const absl::Time started_;
  bool registered_ = false;
  bool watched_ = false;
  // gRPC's reference until OnDone, and the idle watch's while it ends the call.
  std::atomic<int> refs_{1};
  std::atomic<int64_t> last_activity_ns_;

  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // what the call ended with
  grpc::ByteBuffer chunk_;
  grpc::ByteBuffer response_;
  std::string answered_handle_;  // the handle the response carries
  TensorChunkSequence sequence_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_UPLOAD_CALL_H_
