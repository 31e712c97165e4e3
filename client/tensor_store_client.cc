#include "client/tensor_store_client.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/generic_stream.h"
#include "client/tensor_chunks.h"
#include "gemm/v1/gemm.grpc.pb.h"

namespace gemmd {
namespace {

const std::string kPutTensorMethod = "/gemm.v1.GemmService/PutTensor";
const std::string kGetTensorMethod = "/gemm.v1.GemmService/GetTensor";

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// A PutTensor stream's end: the server's status, or the handle it answered (`ok`: the
// stream's writes went through and `response` was read).
absl::StatusOr<StoredHandle> Answer(GenericStream* stream, bool ok, grpc::ByteBuffer* response) {
  if (absl::Status s = stream->Finish(); !s.ok()) return s;
  if (!ok) return absl::InternalError("PutTensor ended without an answer");
  std::vector<grpc::Slice> slices;
  wire::ByteRuns runs;
  gemm::v1::PutTensorResponse answer;
  std::string bytes;
  if (DumpMessage(response, &slices, &runs)) {
    bytes.resize(runs.size());
    runs.CopyTo(bytes.data());
  }
  if (!answer.ParseFromString(bytes) || answer.handle().empty()) {
    return absl::InternalError("PutTensor's answer is not a gemm.v1.PutTensorResponse");
  }
  return StoredHandle{answer.handle(), answer.device()};
}

// One PutTensor stream: `header` in the first chunk with the first data, then the rest of
// `data`, then `scales`, `chunk_bytes` at most per chunk; `continues` as GenericStream's.
// Returns the handle answered.
absl::StatusOr<StoredHandle> Upload(std::shared_ptr<grpc::ChannelInterface> channel,
                                   const gemm::v1::TensorHeader& header, absl::string_view data,
                                   absl::string_view scales, int64_t chunk_bytes,
                                   absl::Duration timeout, const std::string& continues) {
  const size_t budget =
      static_cast<size_t>(chunk_bytes > 0 ? chunk_bytes : kMaxTensorChunkBytes);
  GenericStream stream(std::move(channel), kPutTensorMethod, timeout, continues);
  bool ok = true;
  bool first = true;
  size_t data_at = 0, scales_at = 0;
  do {
    absl::string_view data_part, scales_part;
    if (data_at < data.size()) {
      data_part = data.substr(data_at, budget);
      data_at += data_part.size();
    } else if (scales_at < scales.size()) {
      scales_part = scales.substr(scales_at, budget);
      scales_at += scales_part.size();
    }
    ok = stream.Write(EncodeTensorChunk(first ? &header : nullptr, data_part, scales_part));
    first = false;
  } while (ok && (data_at < data.size() || scales_at < scales.size()));
  grpc::ByteBuffer response;
  ok = ok && stream.WritesDone() && stream.Read(&response);
  return Answer(&stream, ok, &response);
}

// One PutTensor stream of one chunk: `header` and where the bytes lie in a region.
absl::StatusOr<StoredHandle> UploadFromRegion(std::shared_ptr<grpc::ChannelInterface> channel,
                                              const gemm::v1::TensorHeader& header,
                                              const RegionSliceRef& data,
                                              const RegionSliceRef& scales,
                                              absl::Duration timeout,
                                              const std::string& continues) {
  gemm::v1::TensorChunk chunk;
  *chunk.mutable_header() = header;
  if (data.set()) ToProto(data, chunk.mutable_data_shm());
  if (scales.set()) ToProto(scales, chunk.mutable_scales_shm());
  wire::EncodedMessage message;
  message.AddOwned(chunk.SerializeAsString());
  GenericStream stream(std::move(channel), kPutTensorMethod, timeout, continues);
  grpc::ByteBuffer response;
  const bool ok = stream.Write(message) && stream.WritesDone() && stream.Read(&response);
  return Answer(&stream, ok, &response);
}

// Where one GetTensor stream's bytes go: called with the stream's header, it points
// `data` and `scales` at memory that holds exactly the bytes the stream will send.
using PlaceFn = std::function<absl::Status(const gemm::v1::TensorHeader& header,
                                           absl::Span<char>* data, absl::Span<char>* scales)>;

// Copies `runs` to `out` at `*at`; false when they go past its end.
bool CopyInto(const wire::ByteRuns& runs, absl::Span<char> out, size_t* at) {
  if (runs.size() > out.size() - *at) return false;
  runs.CopyTo(out.data() + *at);
  *at += runs.size();
  return true;
}

// One GetTensor stream of `request`: its header to `place`, then every chunk's data and
// scales copied straight where `place` said. Returns the header.
absl::StatusOr<gemm::v1::TensorHeader> ReadStream(std::shared_ptr<grpc::ChannelInterface> channel,
                                                  const gemm::v1::GetTensorRequest& request,
                                                  absl::Duration timeout, const PlaceFn& place) {
  wire::EncodedMessage message;
  message.AddOwned(request.SerializeAsString());
  // Named as what it continues: served by a draining server if it is a temporary.
  GenericStream stream(std::move(channel), kGetTensorMethod, timeout, request.handle());
  bool ok = stream.Write(message) && stream.WritesDone();
  std::optional<gemm::v1::TensorHeader> header;
  absl::Span<char> data, scales;
  size_t data_at = 0, scales_at = 0;
  absl::Status bad = absl::OkStatus();  // a malformed answer
  grpc::ByteBuffer buffer;
  while (ok && bad.ok() && stream.Read(&buffer)) {
    std::vector<grpc::Slice> slices;
    wire::ByteRuns runs;
    TensorChunkWire chunk;
    if (!DumpMessage(&buffer, &slices, &runs)) {
      bad = absl::InternalError("could not read a GetTensor chunk");
      break;
    }
    if (absl::Status s = ParseTensorChunk(runs, &chunk); !s.ok()) {
      bad = absl::InternalError(absl::StrCat("GetTensor chunk: ", s.message()));
      break;
    }
    if (chunk.header.has_value() == header.has_value()) {
      bad = absl::InternalError("GetTensor: the first chunk, and only it, must carry the header");
      break;
    }
    if (chunk.header) {
      header = *std::move(chunk.header);
      if (absl::Status s = place(*header, &data, &scales); !s.ok()) {
        bad = s;
        break;
      }
    }
    if (!CopyInto(chunk.data, data, &data_at) || !CopyInto(chunk.scales, scales, &scales_at)) {
      bad = absl::InternalError("GetTensor sent more bytes than the tensor's shape holds");
    }
  }
  if (!bad.ok()) return bad;  // the destructor cancels the call
  if (absl::Status s = stream.Finish(); !s.ok()) return s;
  if (!header) return absl::InternalError("GetTensor ended without a header");
  if (data_at != data.size() || scales_at != scales.size()) {
    return absl::InternalError(absl::StrCat("GetTensor sent ", data_at, " data and ", scales_at,
                                            " scales bytes; the shape needs ", data.size(),
                                            " and ", scales.size()));
  }
  return *std::move(header);
}

// Runs body(0) .. body(n - 1) at once on `workers` (body(0) on this thread), and returns
// the failure to report: a part refused by the server takes the whole tensor out, so
// parts still going then end NOT_FOUND, possibly before the refused part's answer; the
// cause is the first failure that is not NOT_FOUND.
absl::Status RunParts(PartWorkers& workers, int n, const std::function<absl::Status(int)>& body) {
  absl::Mutex failed_mu;
  absl::Status failed;
  workers.Run(n, [&](int part) {
    absl::Status s = body(part);
    if (s.ok()) return;
    absl::MutexLock lock(&failed_mu);
    if (failed.ok() || (failed.code() == absl::StatusCode::kNotFound &&
                        s.code() != absl::StatusCode::kNotFound)) {
      failed = std::move(s);
    }
  });
  return failed;
}

std::shared_ptr<PartWorkers> WorkersOf(const std::shared_ptr<ConnectionPool>& pool) {
  if (pool == nullptr) return std::make_shared<PartWorkers>();
  return std::shared_ptr<PartWorkers>(pool, &pool->workers());  // keeps the pool
}

}  // namespace

int UploadConnections(int64_t bytes, int64_t rows, int requested) {
  const int64_t parts = requested > 0                     ? requested
                        : bytes >= kParallelUploadBytes ? kDefaultUploadConnections
                                                        : 1;
  const int64_t most = std::min<int64_t>(
      {kMaxUploadConnections, rows, std::max<int64_t>(1, bytes / kMinUploadPartBytes)});
  return static_cast<int>(std::max<int64_t>(1, std::min(parts, most)));
}

TensorStoreClient::TensorStoreClient(std::shared_ptr<grpc::ChannelInterface> channel,
                                     ConnectFn connect)
    : channel_(std::move(channel)),
      pool_(connect ? std::make_shared<ConnectionPool>(std::move(connect)) : nullptr),
      workers_(WorkersOf(pool_)) {}

TensorStoreClient::TensorStoreClient(std::shared_ptr<grpc::ChannelInterface> channel,
                                     std::shared_ptr<ConnectionPool> pool)
    : channel_(std::move(channel)), pool_(std::move(pool)), workers_(WorkersOf(pool_)) {}

TensorStoreClient::TensorStoreClient(const Endpoint& endpoint)
    : TensorStoreClient(ConnectChannel(endpoint), std::make_shared<ConnectionPool>(endpoint)) {}

std::shared_ptr<grpc::ChannelInterface> TensorStoreClient::PartChannel(int index) {
  return pool_ != nullptr ? pool_->Channel(index) : channel_;
}

absl::StatusOr<std::string> TensorStoreClient::PutTensor(const TensorRef& tensor,
                                                         const PutOptions& options) {
  absl::StatusOr<StoredHandle> stored = Store(tensor, options);
  if (!stored.ok()) return stored.status();
  return std::move(stored->handle);
}

absl::StatusOr<std::string> TensorStoreClient::PutTensor(const QuantizedTensorRef& tensor,
                                                         const PutOptions& options) {
  absl::StatusOr<StoredHandle> stored = Store(tensor, options);
  if (!stored.ok()) return stored.status();
  return std::move(stored->handle);
}

absl::StatusOr<StoredHandle> TensorStoreClient::Store(const TensorRef& tensor,
                                                      const PutOptions& options) {
  absl::StatusOr<OpenedTensor> opened = Open(tensor, options);
  if (!opened.ok()) return opened.status();
  if (absl::Status s = SendParts({*opened}); !s.ok()) return s;
  return std::move(opened->stored);
}

absl::StatusOr<StoredHandle> TensorStoreClient::Store(const QuantizedTensorRef& tensor,
                                                      const PutOptions& options) {
  absl::StatusOr<OpenedTensor> opened = Open(tensor, options);
  if (!opened.ok()) return opened.status();
  if (absl::Status s = SendParts({*opened}); !s.ok()) return s;
  return std::move(opened->stored);
}

absl::StatusOr<TensorStoreClient::OpenedTensor> TensorStoreClient::Open(
    const TensorRef& tensor, const PutOptions& options) {
  gemm::v1::TensorHeader header;
  for (int64_t d : tensor.shape) header.add_shape(d);
  header.set_dtype(tensor.dtype);
  if (tensor.shm.set()) return PutFromRegion(std::move(header), tensor.shm, {}, options);
  return OpenPut(std::move(header), tensor.data, {}, options);
}

absl::StatusOr<TensorStoreClient::OpenedTensor> TensorStoreClient::Open(
    const QuantizedTensorRef& tensor, const PutOptions& options) {
  gemm::v1::TensorHeader header;
  for (int64_t d : tensor.shape) header.add_shape(d);
  header.set_format(tensor.format);
  // NVFP4's alone (INT8 has none), as in a QuantizedTensor.
  if (tensor.format == gemm::v1::QUANT_FORMAT_NVFP4) header.set_tensor_scale(tensor.tensor_scale);
  if (tensor.data_shm.set() || tensor.scales_shm.set()) {
    if (!tensor.data_shm.set() || (!tensor.scales_shm.set() && !tensor.scales.empty())) {
      return absl::InvalidArgumentError(
          "a quantized tensor put from a region has its data there, and its scales too");
    }
    return PutFromRegion(std::move(header), tensor.data_shm, tensor.scales_shm, options);
  }
  return OpenPut(std::move(header), tensor.data, tensor.scales, options);
}

absl::StatusOr<TensorStoreClient::OpenedTensor> TensorStoreClient::PutFromRegion(
    gemm::v1::TensorHeader header, const RegionSliceRef& data, const RegionSliceRef& scales,
    const PutOptions& options) {
  header.set_ttl_s(options.ttl_s);
  header.set_label(options.label);
  header.set_device(options.device);
  header.set_temporary(options.temporary);
  absl::StatusOr<StoredHandle> stored =
      UploadFromRegion(channel_, header, data, scales, options.timeout, options.continues);
  if (!stored.ok()) return stored.status();
  OpenedTensor whole;  // sent whole: no parts left
  whole.stored = *std::move(stored);
  return whole;
}

absl::StatusOr<TensorStoreClient::OpenedTensor> TensorStoreClient::OpenPut(
    gemm::v1::TensorHeader header, absl::string_view data, absl::string_view scales,
    const PutOptions& options) {
  absl::StatusOr<TensorRows> rows = RowsOf(header);
  if (!rows.ok()) return rows.status();
  if (static_cast<int64_t>(data.size()) != rows->data_bytes() ||
      static_cast<int64_t>(scales.size()) != rows->scales_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tensor has ", data.size(), " data bytes and ", scales.size(),
        " scales bytes; its shape needs ", rows->data_bytes(), " and ", rows->scales_bytes()));
  }
  header.set_ttl_s(options.ttl_s);
  header.set_label(options.label);
  header.set_device(options.device);
  header.set_temporary(options.temporary);
  const int parts = UploadConnections(rows->data_bytes() + rows->scales_bytes(), rows->rows,
                                      options.connections);
  OpenedTensor opened;
  if (parts == 1) {
    absl::StatusOr<StoredHandle> stored = Upload(channel_, header, data, scales,
                                                 options.chunk_bytes, options.timeout,
                                                 options.continues);
    if (!stored.ok()) return stored.status();
    opened.stored = *std::move(stored);
    return opened;
  }
  // Open the tensor for `parts` uploads (a header with no data); SendParts sends them.
  header.set_parts(static_cast<uint32_t>(parts));
  absl::StatusOr<StoredHandle> stored = Upload(channel_, header, {}, {}, options.chunk_bytes,
                                               options.timeout, options.continues);
  if (!stored.ok()) return stored.status();
  opened.stored = *std::move(stored);
  opened.parts = parts;
  opened.rows = *rows;
  opened.data = data;
  opened.scales = scales;
  opened.chunk_bytes = options.chunk_bytes;
  opened.timeout = options.timeout;
  // A temporary's parts continue the call that opened it.
  if (options.temporary) opened.continues = opened.stored.handle;
  return opened;
}

absl::Status TensorStoreClient::SendParts(absl::Span<const OpenedTensor> opened,
                                          int first_connection) {
  struct Part {
    const OpenedTensor* tensor;
    int part;
  };
  std::vector<Part> all;
  for (const OpenedTensor& t : opened) {
    for (int part = 0; part < t.parts; ++part) all.push_back({&t, part});
  }
  std::vector<std::atomic<bool>> failed(opened.size());
  const absl::Status status =
      RunParts(*workers_, static_cast<int>(all.size()), [&](int index) -> absl::Status {
        const OpenedTensor& t = *all[static_cast<size_t>(index)].tensor;
        const int part = all[static_cast<size_t>(index)].part;
        const RowRange r = PartRows(t.rows.rows, part, t.parts);
        gemm::v1::TensorHeader part_header;
        part_header.mutable_part_of()->set_handle(t.stored.handle);
        part_header.set_part(static_cast<uint32_t>(part));
        absl::Status s =
            Upload(
                PartChannel(first_connection + index), part_header,
                t.data.substr(static_cast<size_t>(r.begin * t.rows.data_row_bytes),
                              static_cast<size_t>((r.end - r.begin) * t.rows.data_row_bytes)),
                t.scales.substr(static_cast<size_t>(r.begin * t.rows.scales_row_bytes),
                                static_cast<size_t>((r.end - r.begin) * t.rows.scales_row_bytes)),
                t.chunk_bytes, t.timeout, t.continues)
                .status();
        if (!s.ok()) failed[static_cast<size_t>(&t - opened.data())].store(true);
        return s;
      });
  if (status.ok()) return status;
  for (size_t i = 0; i < opened.size(); ++i) {
    // The server drops a tensor whose part failed; this makes sure of it (NOT_FOUND when
    // it already has).
    if (failed[i].load()) DeleteTensor(opened[i].stored.handle, opened[i].timeout).IgnoreError();
  }
  return status;
}

absl::StatusOr<DownloadedTensor> TensorStoreClient::GetTensor(const std::string& handle,
                                                              absl::Duration timeout,
                                                              int connections) {
  const absl::Time deadline = absl::Now() + timeout;
  DownloadedTensor out;
  gemm::v1::GetTensorRequest request;
  request.set_handle(handle);
  if (connections > 1) {
    // The first row alone, for the header: then every range at once, in place.
    request.set_row_end(1);
  }
  absl::StatusOr<gemm::v1::TensorHeader> header = ReadStream(
      channel_, request, timeout,
      [&](const gemm::v1::TensorHeader& h, absl::Span<char>* data,
          absl::Span<char>* scales) -> absl::Status {
        absl::StatusOr<TensorRows> rows = RowsOf(h);
        if (!rows.ok()) {
          return absl::InternalError(absl::StrCat("GetTensor header: ", rows.status().message()));
        }
        const int64_t n = connections > 1 ? std::min<int64_t>(1, rows->rows) : rows->rows;
        out.data.resize(static_cast<size_t>(n * rows->data_row_bytes));
        out.scales.resize(static_cast<size_t>(n * rows->scales_row_bytes));
        *data = absl::MakeSpan(out.data);
        *scales = absl::MakeSpan(out.scales);
        return absl::OkStatus();
      });
  if (!header.ok()) return header.status();
  out.header = *header;
  if (connections <= 1) return out;
  absl::StatusOr<TensorRows> rows = RowsOf(out.header);
  if (!rows.ok()) return rows.status();
  out.data.resize(static_cast<size_t>(rows->data_bytes()));
  out.scales.resize(static_cast<size_t>(rows->scales_bytes()));
  const int parts = UploadConnections(rows->data_bytes() + rows->scales_bytes(), rows->rows,
                                      connections);
  absl::StatusOr<gemm::v1::TensorHeader> read =
      ReadInto(handle, *rows, absl::MakeSpan(out.data), absl::MakeSpan(out.scales), parts,
               deadline - absl::Now());
  if (!read.ok()) return read.status();
  out.header = *std::move(read);
  return out;
}

absl::StatusOr<gemm::v1::TensorHeader> TensorStoreClient::ReadInto(
    const std::string& handle, const TensorRows& layout, absl::Span<char> data,
    absl::Span<char> scales, int connections, absl::Duration timeout, int first_connection) {
  if (static_cast<int64_t>(data.size()) != layout.data_bytes() ||
      static_cast<int64_t>(scales.size()) != layout.scales_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadInto: buffers of ", data.size(), " data and ", scales.size(),
        " scales bytes; the tensor has ", layout.data_bytes(), " and ", layout.scales_bytes()));
  }
  const int parts = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(connections, layout.rows)));
  gemm::v1::TensorHeader first;  // part 0's; every part's was checked against `layout`
  const absl::Status failed = RunParts(*workers_, parts, [&](int part) -> absl::Status {
    const RowRange r = PartRows(layout.rows, part, parts);
    gemm::v1::GetTensorRequest request;
    request.set_handle(handle);
    if (parts > 1) {
      request.set_row_begin(r.begin);
      request.set_row_end(r.end);
    }
    absl::StatusOr<gemm::v1::TensorHeader> header = ReadStream(
        parts > 1 ? PartChannel(first_connection + part) : channel_, request, timeout,
        [&](const gemm::v1::TensorHeader& h, absl::Span<char>* d,
            absl::Span<char>* s) -> absl::Status {
          absl::StatusOr<TensorRows> rows = RowsOf(h);
          if (!rows.ok() || rows->rows != layout.rows ||
              rows->data_row_bytes != layout.data_row_bytes ||
              rows->scales_row_bytes != layout.scales_row_bytes) {
            return absl::InternalError(
                "GetTensor's header does not describe the tensor the caller expects");
          }
          *d = data.subspan(static_cast<size_t>(r.begin * layout.data_row_bytes),
                            static_cast<size_t>((r.end - r.begin) * layout.data_row_bytes));
          *s = scales.subspan(static_cast<size_t>(r.begin * layout.scales_row_bytes),
                              static_cast<size_t>((r.end - r.begin) * layout.scales_row_bytes));
          return absl::OkStatus();
        });
    if (!header.ok()) return header.status();
    if (part == 0) first = *std::move(header);
    return absl::OkStatus();
  });
  if (!failed.ok()) return failed;
  return first;
}

absl::Status TensorStoreClient::DeleteTensor(const std::string& handle, absl::Duration timeout) {
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  gemm::v1::TensorHandle request;
  request.set_handle(handle);
  gemm::v1::DeleteTensorResponse response;
  return FromGrpc(stub->DeleteTensor(&context, request, &response));
}

absl::Status TensorStoreClient::DeleteTensors(const std::vector<std::string>& handles,
                                              absl::Duration timeout) {
  absl::Notification done;
  absl::Status status;
  DeleteTensorsAsync(handles, timeout, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

void TensorStoreClient::DeleteTensorsAsync(const std::vector<std::string>& handles,
                                           absl::Duration timeout,
                                           std::function<void(absl::Status)> done) {
  if (handles.empty()) {
    done(absl::OkStatus());
    return;
  }
  // Lives until the last answer: the stub keeps the channel.
  struct Deletes {
    struct One {
      grpc::ClientContext context;
      gemm::v1::TensorHandle request;
      gemm::v1::DeleteTensorResponse response;
    };
    std::unique_ptr<gemm::v1::GemmService::Stub> stub;
    std::vector<One> ones;
    std::function<void(absl::Status)> done;
    absl::Mutex mu;
    size_t pending ABSL_GUARDED_BY(mu) = 0;
    absl::Status first ABSL_GUARDED_BY(mu);
  };
  auto* deletes = new Deletes;
  deletes->stub = gemm::v1::GemmService::NewStub(channel_);
  deletes->ones = std::vector<Deletes::One>(handles.size());
  deletes->done = std::move(done);
  deletes->pending = handles.size();
  for (size_t i = 0; i < handles.size(); ++i) {
    Deletes::One& d = deletes->ones[i];
    SetDeadline(&d.context, timeout);
    // Each names its own tensor as what it continues: a draining server deletes a
    // temporary (and refuses others, as any call).
    d.context.AddMetadata(kContinuesMetadata, handles[i]);
    d.request.set_handle(handles[i]);
  }
  for (Deletes::One& d : deletes->ones) {
    deletes->stub->async()->DeleteTensor(
        &d.context, &d.request, &d.response, [deletes](grpc::Status status) {
          absl::Status first;
          {
            absl::MutexLock lock(&deletes->mu);
            if (deletes->first.ok() && !status.ok()) deletes->first = FromGrpc(status);
            if (--deletes->pending > 0) return;
            first = deletes->first;
          }
          // The stub (and its channel reference) goes before `done` runs: the caller
          // still holds the channel then, so its last reference is never dropped here,
          // on gRPC's own thread.
          std::function<void(absl::Status)> done = std::move(deletes->done);
          delete deletes;
          done(std::move(first));
        });
  }
}

absl::StatusOr<gemm::v1::ListTensorsResponse> TensorStoreClient::ListTensors(
    absl::Duration timeout) {
  auto stub = gemm::v1::GemmService::NewStub(channel_);
  const absl::Time deadline = absl::Now() + timeout;
  // Page by page (the server sends at most page_size tensors a reply), into one listing.
  gemm::v1::ListTensorsRequest request;
  gemm::v1::ListTensorsResponse all;
  do {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    gemm::v1::ListTensorsResponse page;
    if (absl::Status s = FromGrpc(stub->ListTensors(&context, request, &page)); !s.ok()) return s;
    for (gemm::v1::TensorInfo& t : *page.mutable_tensors()) *all.add_tensors() = std::move(t);
    page.clear_tensors();
    request.set_page_token(page.next_page_token());
    page.clear_next_page_token();
    all.MergeFrom(page);  // the store's totals, from the last page
  } while (!request.page_token().empty());
  return all;
}

}  // namespace gemmd
