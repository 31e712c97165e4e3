// The TensorChunk stream of PutTensor and GetTensor (gemm.proto's resident tensors) on the
// wire, and the row layout a parallel upload splits a tensor by.
//
// Why by hand: a chunk's data and scales go to gRPC as slices of the caller's tensor
// (EncodeTensorChunk references them, it copies only the header and the field heads), and
// a received chunk's bytes are located in gRPC's slices and copied once, into the tensor
// being assembled; the generated code would copy each chunk into a message first.
// The bytes are standard protobuf gemm.v1.TensorChunk both ways. Pure functions.
#ifndef GEMMD_CLIENT_TENSOR_CHUNKS_H_
#define GEMMD_CLIENT_TENSOR_CHUNKS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/wire_format.h"

namespace gemmd {

// What the server refuses past (gemm.proto's TensorChunk): data + scales of one chunk.
inline constexpr int64_t kMaxTensorChunkBytes = int64_t{4} << 20;

// A tensor as rows of bytes: the R rows a parallel upload divides (dense: shape[0] for
// [rows, cols], batch * rows for [batch, rows, cols]; quantized: the rows of [rows, K]),
// and the data and scales bytes of one row.
struct TensorRows {
  int64_t rows = 0;
  int64_t data_row_bytes = 0;
  int64_t scales_row_bytes = 0;  // quantized only: INT8 4, NVFP4 K/16
  int64_t data_bytes() const { return rows * data_row_bytes; }
  int64_t scales_bytes() const { return rows * scales_row_bytes; }
};

// The rows of the tensor `header` describes (dtype or format, shape). INVALID_ARGUMENT
// for a shape of the wrong rank, negative or overflowing dimensions, an unknown dtype or
// format, or NVFP4 with K not a multiple of 16.
absl::StatusOr<TensorRows> RowsOf(const gemm::v1::TensorHeader& header);

// Part `part` of `parts` holds rows [part*R/parts, (part+1)*R/parts) (integer division).
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};
RowRange PartRows(int64_t rows, int part, int parts);

// One TensorChunk, as the server encodes it too (proto/wire/gemm_wire.h).
using wire::EncodeTensorChunk;

// A received TensorChunk: its header when it has one, its data and scales as views into
// the received bytes. INVALID_ARGUMENT for malformed bytes or a field sent twice.
struct TensorChunkWire {
  std::optional<gemm::v1::TensorHeader> header;
  wire::ByteRuns data, scales;
};
absl::Status ParseTensorChunk(const wire::ByteRuns& bytes, TensorChunkWire* out);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_TENSOR_CHUNKS_H_
