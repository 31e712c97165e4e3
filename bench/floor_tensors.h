// grpc-floor's tensor store: what a striped call (client/striped_call.h) asks of
// gemm-server's store, answered with no bytes kept, so `gemm-cli bench --stripes N`
// against grpc-floor prices gRPC's own part of that protocol (its opens, parts, Matmul by
// handle, row-range reads and deletes) beside the same call against gemm-server.
//
// Only headers are kept (shape, dtype or format), each under a handle: an upload's bytes
// are read and dropped (or, with copy_payloads, copied once out of gRPC's buffers into
// a buffer of the thread's, the least a server that stores them does), a Matmul by
// handle takes its operands' shapes from here and keeps C's, and GetTensor sends zeros of
// the size the header and row range say, each range from its own place in memory the
// tensor's size (not one small buffer the caches keep), in chunks of gemm-server's
// download size after a header-only chunk, as gemm-server does. Thread-safe.
#ifndef GEMMD_BENCH_FLOOR_TENSORS_H_
#define GEMMD_BENCH_FLOOR_TENSORS_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <vector>

#include "gemm/v1/gemm.pb.h"

namespace gemmd::floor {

// The header kept under `handle`, if any.
std::optional<gemm::v1::TensorHeader> FindTensor(const std::string& handle);
// Keeps `header` under a new handle, which it returns.
std::string KeepTensor(const gemm::v1::TensorHeader& header);

// PutTensor, given the stream's first chunk: the answer to send once the stream ends (its
// other chunks are read and dropped). A header that opens a tensor for parts, or carries
// the first bytes of a whole one, is kept under a new handle; a part's answer is the
// handle it is part of (NOT_FOUND when no such tensor is kept).
grpc::Status AnswerPutTensor(grpc::ByteBuffer* first_chunk, grpc::ByteBuffer* response);
// With copy_payloads, copies a PutTensor chunk's data and scales out of gRPC's buffers
// into a 4 MiB buffer of the calling thread's (over and over), as gemm-server copies
// them into page-locked memory on their way to a GPU. INVALID_ARGUMENT for a chunk that
// does not parse.
grpc::Status CopyChunkPayload(grpc::ByteBuffer* chunk);

// GetTensor: the messages to send in order (the tensor's header alone, then the rows'
// data and scales in chunks of zeros), or the error.
grpc::Status AnswerGetTensor(grpc::ByteBuffer* request, std::vector<grpc::ByteBuffer>* chunks);

// DeleteTensor: forgets the handle (NOT_FOUND when it is not kept).
grpc::Status AnswerDeleteTensor(grpc::ByteBuffer* request, grpc::ByteBuffer* response);

// Bytes [offset, offset + bytes) of zeros shared by every answer (kept for the process).
grpc::Slice Zeros(size_t bytes, size_t offset = 0);

}  // namespace gemmd::floor

#endif  // GEMMD_BENCH_FLOOR_TENSORS_H_
