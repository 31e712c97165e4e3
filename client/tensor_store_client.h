// The client of gemmd's resident tensors (gemm.proto: PutTensor, GetTensor, DeleteTensor,
// ListTensors): a tensor uploaded once and then named by its handle in MatmulArgs::a_ref /
// b_ref / c_ref (gemm_client.h) instead of being sent with every request.
//
//   gemmd::TensorStoreClient store("127.0.0.1:50051");
//   absl::StatusOr<std::string> handle =
//       store.PutTensor(gemmd::TensorRef{{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b_bytes});
//   args.b_ref = *handle;                 // then GemmClient::Matmul(args, ...)
//   store.DeleteTensor(*handle);
//
// Uploads send the caller's bytes as they are (slices referencing its memory, in chunks
// of at most 4 MiB), and large ones go over several connections at once: one HTTP/2
// connection tops out near 1 GB/s. A parallel upload opens the tensor with parts=N, then
// sends part i (rows [i*R/N, (i+1)*R/N), data and scales alike) on connection i, each in
// its own stream, all at once (on the pool's PartWorkers); the server makes the tensor
// usable once every part has arrived, and drops it when one fails. Downloads likewise:
// ReadInto reads a tensor's rows in ranges, range i on connection i, straight into the
// caller's buffer. The connections are the client's ConnectionPool, kept open between
// calls, and so are the threads.
//
// Errors are the server's gRPC status as an absl::Status (same code and message), or
// INVALID_ARGUMENT from the client for a tensor whose bytes do not match its shape.
// Thread-safe: one client may run any number of calls at once.
#ifndef GEMMD_CLIENT_TENSOR_STORE_CLIENT_H_
#define GEMMD_CLIENT_TENSOR_STORE_CLIENT_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/connection_pool.h"
#include "client/gemm_client.h"
#include "client/part_workers.h"
#include "client/tensor_chunks.h"
#include "gemm/v1/gemm.pb.h"

namespace gemmd {

// Uploads at least this large go over kDefaultUploadConnections connections when
// PutOptions::connections is 0 (one HTTP/2 connection carries a fraction of what TCP can;
// docs/BENCHMARKS.md, "Resident tensors", has the rates by connection count).
inline constexpr int64_t kParallelUploadBytes = int64_t{64} << 20;
inline constexpr int kDefaultUploadConnections = 8;
// Most connections one upload uses, and the least a part carries: past these, opening
// connections costs more than it carries (1000 once opened 256 connections for 128 KB).
inline constexpr int kMaxUploadConnections = 64;
inline constexpr int64_t kMinUploadPartBytes = int64_t{1} << 20;

struct PutOptions {
  uint32_t ttl_s = 0;  // the server drops the tensor this long after the upload; 0 = never
  std::string label;   // shown by ListTensors (the server takes up to 256 bytes)
  // The server device to keep it on ("cuda:1"; see GetServerInfo); empty = the server's
  // choice. Tensors one GEMM reads by handle must be on one device.
  std::string device;
  // Part uploads in parallel, each on its own connection: 0 = 1 for tensors under
  // kParallelUploadBytes (data + scales), else kDefaultUploadConnections. Capped at
  // kMaxUploadConnections, the tensor's rows, and one part per kMinUploadPartBytes.
  int connections = 0;
  // Data + scales per TensorChunk (the server's Limits.max_tensor_chunk_bytes, at most).
  int64_t chunk_bytes = int64_t{4} << 20;
  absl::Duration timeout = absl::Seconds(60);  // each stream's deadline
  // Part of one call of several RPCs (a striped call, client/striped_call.h): the tensor
  // is a temporary (TensorHeader.temporary), and `continues` names a temporary the call
  // made before (sent as gemmd-continues), so a draining server still serves the call.
  bool temporary = false;
  std::string continues;
};

// How many parts an upload of `bytes` (data + scales) in `rows` rows goes in, for
// PutOptions::connections = `requested` (see there).
int UploadConnections(int64_t bytes, int64_t rows, int requested);

// A stored tensor's handle and the device it is kept on (TensorHeader.device's form,
// "cuda:0"): tensors one GEMM reads by handle go to one device.
struct StoredHandle {
  std::string handle;
  std::string device;
};

// A tensor read back from the server (GetTensor).
struct DownloadedTensor {
  // shape; dtype (dense) or format and tensor_scale (quantized); label; ttl_s.
  gemm::v1::TensorHeader header;
  std::string data;
  std::string scales;  // quantized tensors only
};

class TensorStoreClient {
 public:
  // The channel for part upload `index` (0 .. connections-1); channels for different
  // indexes should be different connections (ConnectChannel(target, index) are).
  using ConnectFn = std::function<std::shared_ptr<grpc::ChannelInterface>(int index)>;

  // Every call goes over `channel`, and a parallel upload's or download's part i over
  // connect(i) (over `channel` too when `connect` is empty: parallel streams, one
  // connection).
  explicit TensorStoreClient(std::shared_ptr<grpc::ChannelInterface> channel,
                             ConnectFn connect = {});
  // Parts over the pool's connections (shared with other clients, e.g. a GemmClient's).
  TensorStoreClient(std::shared_ptr<grpc::ChannelInterface> channel,
                    std::shared_ptr<ConnectionPool> pool);
  // ConnectChannel(endpoint) for the calls, ConnectChannel(endpoint, 1 + i) for part i.
  explicit TensorStoreClient(const Endpoint& endpoint);

  // Uploads a dense tensor ([rows, cols] or [batch, rows, cols] of tensor.dtype) or a
  // quantized one ([rows, K]; data and scales as in gemm.proto's QuantizedTensor) and
  // returns its handle. The tensor's memory is only read, and only during the call. A
  // tensor whose bytes lie in a registered region (TensorRef::shm,
  // QuantizedTensorRef::data_shm / scales_shm) goes as one chunk naming them: the server
  // copies them from there.
  absl::StatusOr<std::string> PutTensor(const TensorRef& tensor, const PutOptions& options = {});
  absl::StatusOr<std::string> PutTensor(const QuantizedTensorRef& tensor,
                                        const PutOptions& options = {});
  // The same, answering the device the tensor went to as well.
  absl::StatusOr<StoredHandle> Store(const TensorRef& tensor, const PutOptions& options = {});
  absl::StatusOr<StoredHandle> Store(const QuantizedTensorRef& tensor,
                                     const PutOptions& options = {});

  // Several tensors stored at once (a striped call's operands): Open each in turn,
  // which sends one in parts only its header (one small RPC: the handle and the device,
  // so the next can go to the same device and name the first as the call it continues),
  // and the rest whole; then SendParts sends every opened tensor's parts together.
  // Store is Open then SendParts.
  struct OpenedTensor {
    StoredHandle stored;
    int parts = 0;  // 0: complete already (sent whole by Open)
    TensorRows rows;
    absl::string_view data;  // the caller's bytes, read by SendParts
    absl::string_view scales;
    int64_t chunk_bytes = 0;
    absl::Duration timeout;
    std::string continues;  // what each part names (the tensor itself, for a temporary)
  };
  absl::StatusOr<OpenedTensor> Open(const TensorRef& tensor, const PutOptions& options = {});
  absl::StatusOr<OpenedTensor> Open(const QuantizedTensorRef& tensor,
                                    const PutOptions& options = {});
  // Every part of every tensor in `opened` at once, each on its own connection (tensor
  // i's part p on the pool's connection i * parts + p... in order of the parts before
  // it). A failed part fails the tensors' store: the one it belongs to is deleted (the
  // server drops it too); the others stay for the caller (they are complete, or will
  // be dropped unfinished by the server). The first failure, as RunParts picks it.
  // `first_connection` shifts them all (part 0 on that connection).
  absl::Status SendParts(absl::Span<const OpenedTensor> opened, int first_connection = 0);

  // Downloads a tensor: its header, data and scales, over `connections` connections
  // (1: the client's channel; more: a first stream learns the tensor's size, then
  // ReadInto).
  absl::StatusOr<DownloadedTensor> GetTensor(const std::string& handle,
                                             absl::Duration timeout = absl::Seconds(60),
                                             int connections = 1);
  // Reads the tensor `handle` names, whose rows are `layout` (the client knows its shape,
  // e.g. a Matmul's C), into `data` and `scales`, which hold exactly its bytes: in
  // `connections` row ranges (PartRows), range i over the pool's connection i, each
  // written in place. `connections` 1 reads it over the client's channel. The server's
  // error (a range the tensor does not have: OUT_OF_RANGE), or INTERNAL for an answer
  // whose header or bytes do not match `layout`. Returns the tensor's header.
  // `first_connection` shifts the ranges' connections (range 0 on that one).
  absl::StatusOr<gemm::v1::TensorHeader> ReadInto(const std::string& handle,
                                                  const TensorRows& layout, absl::Span<char> data,
                                                  absl::Span<char> scales, int connections,
                                                  absl::Duration timeout = absl::Seconds(60),
                                                  int first_connection = 0);
  absl::Status DeleteTensor(const std::string& handle, absl::Duration timeout = absl::Seconds(60));
  // Deletes every tensor named, all at once (one round trip); the first error, if any.
  absl::Status DeleteTensors(const std::vector<std::string>& handles,
                             absl::Duration timeout = absl::Seconds(60));
  // The same without waiting: `done` runs once, on a gRPC thread, with the first error
  // (or OK) when every delete has been answered. The caller keeps the channel until
  // `done` runs (gRPC may not drop a channel's last reference on its own thread).
  void DeleteTensorsAsync(const std::vector<std::string>& handles, absl::Duration timeout,
                          std::function<void(absl::Status)> done);
  // Every tensor of the caller's, all pages of the listing in one response (the store's
  // totals as of its last page); `timeout` bounds the whole listing.
  absl::StatusOr<gemm::v1::ListTensorsResponse> ListTensors(
      absl::Duration timeout = absl::Seconds(60));

 private:
  absl::StatusOr<OpenedTensor> OpenPut(gemm::v1::TensorHeader header, absl::string_view data,
                                       absl::string_view scales, const PutOptions& options);
  // A tensor whose bytes lie in a region, put whole (one chunk naming them).
  absl::StatusOr<OpenedTensor> PutFromRegion(gemm::v1::TensorHeader header,
                                             const RegionSliceRef& data,
                                             const RegionSliceRef& scales,
                                             const PutOptions& options);
  // The channel of part `index`: the pool's connection, or the client's channel.
  std::shared_ptr<grpc::ChannelInterface> PartChannel(int index);

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  // Connections of parallel parts, kept between calls; null: parts share channel_.
  const std::shared_ptr<ConnectionPool> pool_;
  // The pool's, or (without a pool) this client's own: they run the parts.
  const std::shared_ptr<PartWorkers> workers_;
};

}  // namespace gemmd

#endif  // GEMMD_CLIENT_TENSOR_STORE_CLIENT_H_
