#include "bench/floor_tensors.h"

#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/generic_stream.h"
#include "client/tensor_chunks.h"
#include "proto/wire/gemm_wire.h"

namespace gemmd::floor {
namespace {

// gemm-server's GetTensor chunk (kDownloadChunkBytes, server/rpc/tensor_download_call.h).
constexpr int64_t kChunkBytes = int64_t{2} << 20;
// The largest tensor put here: its zeros are allocated when it is read.
constexpr int64_t kMaxTensorBytes = int64_t{16} << 30;

class ZeroBuffers {
 public:
  grpc::Slice Take(size_t bytes, size_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    if (offset + bytes > size_) {
      size_ = std::max(offset + bytes, 2 * size_);
      buffers_.push_back(std::make_unique<char[]>(size_));  // zero-filled, kept forever
    }
    return grpc::Slice(buffers_.back().get() + offset, bytes, grpc::Slice::STATIC_SLICE);
  }

 private:
  std::mutex mu_;
  size_t size_ = 0;
  // Every buffer ever made: slices of the older ones may still be in flight.
  std::vector<std::unique_ptr<char[]>> buffers_;
};

ZeroBuffers zero_buffers;

struct Store {
  std::mutex mu;
  absl::flat_hash_map<std::string, gemm::v1::TensorHeader> headers;
  uint64_t next = 1;
};

Store& TheStore() {
  static Store* store = new Store;
  return *store;
}

// `buffer`'s bytes where they lie, in `slices` (which hold them); none when gRPC cannot
// read it (the parser then refuses them).
wire::ByteRuns RunsOf(grpc::ByteBuffer* buffer, std::vector<grpc::Slice>* slices) {
  wire::ByteRuns runs;
  if (!DumpMessage(buffer, slices, &runs)) return wire::ByteRuns();
  return runs;
}

// A small message's bytes in one piece, for the generated parser.
std::string Flat(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  const wire::ByteRuns runs = RunsOf(buffer, &slices);
  std::string bytes(runs.size(), '\0');
  runs.CopyTo(bytes.data());
  return bytes;
}

grpc::ByteBuffer Serialized(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// `message`, its payloads referenced where they lie (zeros, kept for the process).
grpc::ByteBuffer Encoded(const wire::EncodedMessage& message) {
  std::vector<grpc::Slice> slices;
  for (const wire::EncodedMessage::Piece& piece : message.pieces()) {
    slices.push_back(piece.is_payload ? grpc::Slice(const_cast<char*>(piece.payload.data()),
                                                    piece.payload.size(), grpc::Slice::STATIC_SLICE)
                                      : grpc::Slice(piece.owned));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::Status Invalid(absl::string_view message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(message));
}

grpc::Status NotFound(const std::string& handle) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("grpc-floor keeps no tensor '", handle, "'"));
}

}  // namespace

grpc::Slice Zeros(size_t bytes, size_t offset) { return zero_buffers.Take(bytes, offset); }

grpc::Status CopyChunkPayload(grpc::ByteBuffer* chunk) {
  constexpr size_t kBufferBytes = size_t{4} << 20;
  thread_local std::unique_ptr<char[]> buffer(new char[kBufferBytes]);
  thread_local size_t at = 0;
  std::vector<grpc::Slice> slices;
  wire::TensorChunkWire parsed;
  if (absl::Status s = wire::ParseTensorChunk(RunsOf(chunk, &slices), &parsed); !s.ok()) {
    return Invalid(s.message());
  }
  for (const wire::ByteRuns* payload : {&parsed.data, &parsed.scales}) {
    for (absl::string_view run : payload->runs()) {
      while (!run.empty()) {
        if (at == kBufferBytes) at = 0;
        const size_t n = std::min(run.size(), kBufferBytes - at);
        std::memcpy(buffer.get() + at, run.data(), n);
        at += n;
        run.remove_prefix(n);
      }
    }
  }
  return grpc::Status::OK;
}

std::optional<gemm::v1::TensorHeader> FindTensor(const std::string& handle) {
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mu);
  auto it = store.headers.find(handle);
  if (it == store.headers.end()) return std::nullopt;
  return it->second;
}

std::string KeepTensor(const gemm::v1::TensorHeader& header) {
  Store& store = TheStore();
  std::lock_guard<std::mutex> lock(store.mu);
  std::string handle = absl::StrCat("floor-", store.next++);
  gemm::v1::TensorHeader& kept = store.headers[handle];
  *kept.mutable_shape() = header.shape();
  kept.set_dtype(header.dtype());
  kept.set_format(header.format());
  kept.set_tensor_scale(header.tensor_scale());
  kept.set_device("none");
  return handle;
}

grpc::Status AnswerPutTensor(grpc::ByteBuffer* first_chunk, grpc::ByteBuffer* response) {
  std::vector<grpc::Slice> slices;
  wire::TensorChunkWire chunk;
  if (absl::Status s = wire::ParseTensorChunk(RunsOf(first_chunk, &slices), &chunk); !s.ok()) {
    return Invalid(s.message());
  }
  if (!chunk.has_header) return Invalid("the first chunk must carry the header");
  gemm::v1::PutTensorResponse answer;
  if (chunk.header.has_part_of()) {
    const std::string& of = chunk.header.part_of().handle();
    if (!FindTensor(of)) return NotFound(of);
    answer.set_handle(of);
  } else {
    absl::StatusOr<TensorRows> rows = RowsOf(chunk.header);
    if (!rows.ok()) return Invalid(rows.status().message());
    if (rows->data_bytes() + rows->scales_bytes() > kMaxTensorBytes) {
      return Invalid(absl::StrCat("grpc-floor keeps tensors of up to ", kMaxTensorBytes, " bytes"));
    }
    answer.set_handle(KeepTensor(chunk.header));
  }
  answer.set_device("none");
  *response = Serialized(answer);
  return grpc::Status::OK;
}

grpc::Status AnswerGetTensor(grpc::ByteBuffer* request, std::vector<grpc::ByteBuffer>* chunks) {
  gemm::v1::GetTensorRequest r;
  if (!r.ParseFromString(Flat(request))) return Invalid("not a GetTensorRequest");
  const std::optional<gemm::v1::TensorHeader> header = FindTensor(r.handle());
  if (!header) return NotFound(r.handle());
  absl::StatusOr<TensorRows> rows = RowsOf(*header);
  if (!rows.ok()) return Invalid(rows.status().message());
  int64_t begin = r.row_begin(), end = r.row_end();
  if (begin == 0 && end == 0) end = rows->rows;
  if (begin < 0 || end <= begin || end > rows->rows) {
    return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "rows are not a range of the tensor");
  }
  chunks->clear();
  chunks->push_back(Encoded(wire::EncodeTensorChunk(&*header, "", "")));
  const int64_t data = (end - begin) * rows->data_row_bytes;
  const int64_t scales = (end - begin) * rows->scales_row_bytes;
  // The range's bytes at their place in the tensor: data, then scales after all the data.
  const int64_t data_begin = begin * rows->data_row_bytes;
  const int64_t scales_begin = rows->data_bytes() + begin * rows->scales_row_bytes;
  for (int64_t at = 0; at < data + scales;) {
    const bool in_data = at < data;
    const int64_t n = std::min(kChunkBytes, in_data ? data - at : data + scales - at);
    const grpc::Slice zeros =
        Zeros(static_cast<size_t>(n),
              static_cast<size_t>(in_data ? data_begin + at : scales_begin + at - data));
    const absl::string_view part(reinterpret_cast<const char*>(zeros.begin()), zeros.size());
    chunks->push_back(
        Encoded(wire::EncodeTensorChunk(nullptr, in_data ? part : "", in_data ? "" : part)));
    at += n;
  }
  return grpc::Status::OK;
}

grpc::Status AnswerDeleteTensor(grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  gemm::v1::TensorHandle handle;
  if (!handle.ParseFromString(Flat(request))) return Invalid("not a TensorHandle");
  Store& store = TheStore();
  {
    std::lock_guard<std::mutex> lock(store.mu);
    if (store.headers.erase(handle.handle()) == 0) return NotFound(handle.handle());
  }
  *response = Serialized(gemm::v1::DeleteTensorResponse());
  return grpc::Status::OK;
}

}  // namespace gemmd::floor
