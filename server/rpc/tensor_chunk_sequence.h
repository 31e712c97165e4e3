// The PutTensor protocol in plain C++, apart from gRPC: the chunks of one stream, in
// order, into the tensor store. TensorUploadCall feeds it what it receives; the fuzz
// target feeds it arbitrary chunk sequences.
//
// The first chunk's header says what the tensor is; the store admits it (cap checked,
// memory taken) before any data is read. Later chunks carry data and scales only, at
// most kMaxTensorChunkBytes each. Complete() checks that every byte came and adds the
// tensor to the store. A header with parts >= 2 opens a tensor for parallel parts (its
// stream carries no bytes) and completes with its handle; a header with part_of uploads
// one part. A chunk's data or scales may lie in a shared-memory region of the caller's
// (data_shm, scales_shm) instead, copied from there into the store. Destroyed before
// Complete() succeeds, it leaves nothing in the store.
// Not thread-safe: one stream's chunks arrive one at a time.
#ifndef GEMMD_SERVER_RPC_TENSOR_CHUNK_SEQUENCE_H_
#define GEMMD_SERVER_RPC_TENSOR_CHUNK_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/wire/gemm_wire.h"
#include "server/regions/region_table.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// Data plus scales one TensorChunk may carry.
inline constexpr int64_t kMaxTensorChunkBytes = int64_t{4} << 20;

// gemm.v1.TensorHeader to a TensorSpec: INVALID_ARGUMENT for a header that is neither
// dense nor quantized (or both), or a dtype / format the GEMMs do not take.
absl::StatusOr<TensorSpec> SpecFromHeader(const gemm::v1::TensorHeader& header);

class TensorChunkSequence {
 public:
  // `store` (and `regions`, null: none) outlive this; `tenant` is the caller's, and the
  // tensor is stored as theirs.
  TensorChunkSequence(TensorStore* store, std::string tenant,
                      const RegionTable* regions = nullptr);

  // One received chunk (its serialized bytes). INVALID_ARGUMENT for a malformed chunk, a
  // header missing or out of place, bytes beyond the tensor, or data both inline and in
  // a region; the store's errors (RESOURCE_EXHAUSTED, NOT_FOUND, ...) and the regions'
  // (NOT_FOUND, OUT_OF_RANGE, FAILED_PRECONDITION) as they come. After an error the
  // sequence is over: drop it.
  absl::Status Consume(const wire::ByteRuns& chunk_bytes);
  // The stream ended: the tensor's handle, or INVALID_ARGUMENT (no chunk, bytes missing).
  absl::StatusOr<std::string> Complete();
  // Drops an unfinished upload now (its memory is free before the caller answers).
  void Abandon() { upload_.reset(); }
  // A tensor (or part) was begun and has not completed.
  bool in_progress() const { return upload_ != nullptr && !completed_; }
  // The handle of the tensor this stream writes or opened ("" before its header).
  std::string handle() const;

  int64_t chunks() const { return chunks_; }
  // The stream opened a tensor for parts (and carried none of its bytes).
  bool opened_parts() const { return !opened_.empty(); }
  int64_t bytes_written() const { return upload_ == nullptr ? 0 : upload_->bytes_written(); }

 private:
  absl::Status BeginFrom(const gemm::v1::TensorHeader& header);

  // Bytes in a region, or none; holds the region while the bytes are copied.
  absl::StatusOr<wire::ByteRuns> RegionBytes(const char* field, bool set,
                                             const gemm::v1::RegionSlice& slice,
                                             const wire::ByteRuns& inline_bytes,
                                             std::shared_ptr<SharedRegion>* held) const;

  TensorStore* const store_;
  const std::string tenant_;
  const RegionTable* const regions_;
  int64_t chunks_ = 0;
  std::unique_ptr<TensorStore::Upload> upload_;
  std::string opened_;  // the handle of a tensor opened for parts
  bool completed_ = false;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_CHUNK_SEQUENCE_H_
