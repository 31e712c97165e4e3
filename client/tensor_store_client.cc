#include "client/tensor_store_client.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
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

// One PutTensor stream: `header` in the first chunk with the first data, then the rest of
// `data`, then `scales`, `chunk_bytes` at most per chunk. Returns the handle answered.
absl::StatusOr<std::string> Upload(std::shared_ptr<grpc::ChannelInterface> channel,
                                   const gemm::v1::TensorHeader& header, absl::string_view data,
                                   absl::string_view scales, int64_t chunk_bytes,
                                   absl::Duration timeout) {
  const size_t budget =
      static_cast<size_t>(chunk_bytes > 0 ? chunk_bytes : kMaxTensorChunkBytes);
  GenericStream stream(std::move(channel), kPutTensorMethod, timeout);
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
  if (absl::Status s = stream.Finish(); !s.ok()) return s;
  if (!ok) return absl::InternalError("PutTensor ended without an answer");
  std::vector<grpc::Slice> slices;
  wire::ByteRuns runs;
  gemm::v1::TensorHandle handle;
  std::string bytes;
  if (DumpMessage(&response, &slices, &runs)) {
    bytes.resize(runs.size());
    runs.CopyTo(bytes.data());
  }
  if (!handle.ParseFromString(bytes) || handle.handle().empty()) {
    return absl::InternalError("PutTensor's answer is not a gemm.v1.TensorHandle");
  }
  return handle.handle();
}

// Appends `runs` to `out`, which may hold at most `limit` bytes; false past it.
bool AppendRuns(const wire::ByteRuns& runs, int64_t limit, std::string* out) {
  if (static_cast<int64_t>(out->size() + runs.size()) > limit) return false;
  const size_t at = out->size();
  out->resize(at + runs.size());
  runs.CopyTo(out->data() + at);
  return true;
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
    : channel_(std::move(channel)), connect_(std::move(connect)) {}

TensorStoreClient::TensorStoreClient(const std::string& target)
    : TensorStoreClient(ConnectChannel(target),
                        [target](int index) { return ConnectChannel(target, 1 + index); }) {}

std::shared_ptr<grpc::ChannelInterface> TensorStoreClient::PartChannel(int index) {
  if (!connect_) return channel_;
  absl::MutexLock lock(&mu_);
  while (static_cast<int>(part_channels_.size()) <= index) {
    part_channels_.push_back(connect_(static_cast<int>(part_channels_.size())));
  }
  return part_channels_[static_cast<size_t>(index)];
}

absl::StatusOr<std::string> TensorStoreClient::PutTensor(const TensorRef& tensor,
                                                         const PutOptions& options) {
  gemm::v1::TensorHeader header;
  for (int64_t d : tensor.shape) header.add_shape(d);
  header.set_dtype(tensor.dtype);
  return Put(std::move(header), tensor.data, {}, options);
}

absl::StatusOr<std::string> TensorStoreClient::PutTensor(const QuantizedTensorRef& tensor,
                                                         const PutOptions& options) {
  gemm::v1::TensorHeader header;
  for (int64_t d : tensor.shape) header.add_shape(d);
  header.set_format(tensor.format);
  // NVFP4's alone (INT8 has none), as in a QuantizedTensor.
  if (tensor.format == gemm::v1::QUANT_FORMAT_NVFP4) header.set_tensor_scale(tensor.tensor_scale);
  return Put(std::move(header), tensor.data, tensor.scales, options);
}

absl::StatusOr<std::string> TensorStoreClient::Put(gemm::v1::TensorHeader header,
                                                   absl::string_view data,
                                                   absl::string_view scales,
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
  const int parts = UploadConnections(rows->data_bytes() + rows->scales_bytes(), rows->rows,
                                      options.connections);
  if (parts == 1) {
    return Upload(channel_, header, data, scales, options.chunk_bytes, options.timeout);
  }

  // Open the tensor for `parts` uploads (a header with no data), then send each part on
  // its own connection and thread.
  header.set_parts(static_cast<uint32_t>(parts));
  absl::StatusOr<std::string> handle =
      Upload(channel_, header, {}, {}, options.chunk_bytes, options.timeout);
  if (!handle.ok()) return handle.status();
  absl::Mutex failed_mu;
  // The part failure to report. A part refused by the server takes the whole tensor out,
  // so parts still going then end NOT_FOUND, possibly before the refused part's answer
  // reaches its thread: the cause is the first failure that is not NOT_FOUND.
  std::optional<absl::Status> failed;
  auto send_part = [&](int part) {
    const RowRange r = PartRows(rows->rows, part, parts);
    gemm::v1::TensorHeader part_header;
    part_header.mutable_part_of()->set_handle(*handle);
    part_header.set_part(static_cast<uint32_t>(part));
    const absl::StatusOr<std::string> answer = Upload(
        PartChannel(part), part_header,
        data.substr(static_cast<size_t>(r.begin * rows->data_row_bytes),
                    static_cast<size_t>((r.end - r.begin) * rows->data_row_bytes)),
        scales.substr(static_cast<size_t>(r.begin * rows->scales_row_bytes),
                      static_cast<size_t>((r.end - r.begin) * rows->scales_row_bytes)),
        options.chunk_bytes, options.timeout);
    if (answer.ok()) return;
    absl::MutexLock lock(&failed_mu);
    if (!failed || (failed->code() == absl::StatusCode::kNotFound &&
                    answer.status().code() != absl::StatusCode::kNotFound)) {
      failed = answer.status();
    }
  };
  std::vector<std::thread> threads;
  for (int part = 1; part < parts; ++part) threads.emplace_back(send_part, part);
  send_part(0);
  for (std::thread& t : threads) t.join();
  if (failed) {
    // The server drops a tensor whose part failed; this makes sure of it (NOT_FOUND when
    // it already has).
    DeleteTensor(*handle, options.timeout).IgnoreError();
    return *failed;
  }
  return handle;
}

absl::StatusOr<DownloadedTensor> TensorStoreClient::GetTensor(const std::string& handle,
                                                          absl::Duration timeout) {
  gemm::v1::TensorHandle request;
  request.set_handle(handle);
  wire::EncodedMessage message;
  message.AddOwned(request.SerializeAsString());
  GenericStream stream(channel_, kGetTensorMethod, timeout);
  bool ok = stream.Write(message) && stream.WritesDone();
  DownloadedTensor out;
  std::optional<TensorRows> rows;
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
    if (chunk.header.has_value() != !rows.has_value()) {
      bad = absl::InternalError("GetTensor: the first chunk, and only it, must carry the header");
      break;
    }
    if (chunk.header) {
      absl::StatusOr<TensorRows> r = RowsOf(*chunk.header);
      if (!r.ok()) {
        bad = absl::InternalError(absl::StrCat("GetTensor header: ", r.status().message()));
        break;
      }
      rows = *r;
      out.header = *std::move(chunk.header);
      out.data.reserve(static_cast<size_t>(rows->data_bytes()));
      out.scales.reserve(static_cast<size_t>(rows->scales_bytes()));
    }
    if (!AppendRuns(chunk.data, rows->data_bytes(), &out.data) ||
        !AppendRuns(chunk.scales, rows->scales_bytes(), &out.scales)) {
      bad = absl::InternalError("GetTensor sent more bytes than the tensor's shape holds");
    }
  }
  if (!bad.ok()) return bad;  // the destructor cancels the call
  if (absl::Status s = stream.Finish(); !s.ok()) return s;
  if (!rows) return absl::InternalError("GetTensor ended without a header");
  if (static_cast<int64_t>(out.data.size()) != rows->data_bytes() ||
      static_cast<int64_t>(out.scales.size()) != rows->scales_bytes()) {
    return absl::InternalError(absl::StrCat(
        "GetTensor sent ", out.data.size(), " data and ", out.scales.size(),
        " scales bytes; the shape needs ", rows->data_bytes(), " and ", rows->scales_bytes()));
  }
  return out;
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
