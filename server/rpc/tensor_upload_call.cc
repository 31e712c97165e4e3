#include "server/rpc/tensor_upload_call.h"

#include <grpcpp/support/slice.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/grpc_status.h"

namespace gemmd {

absl::StatusOr<TensorSpec> SpecFromHeader(const gemm::v1::TensorHeader& header) {
  TensorSpec spec;
  spec.shape.assign(header.shape().begin(), header.shape().end());
  const bool dense = header.dtype() != gemm::v1::DATA_TYPE_UNSPECIFIED;
  const bool quantized = header.format() != gemm::v1::QUANT_FORMAT_UNSPECIFIED;
  if (dense == quantized) {
    return absl::InvalidArgumentError(
        dense ? "header sets both dtype and format; a tensor is dense (dtype) or quantized "
                "(format)"
              : "header sets neither dtype nor format; set dtype (FLOAT32, FLOAT16, BFLOAT16) "
                "for a dense tensor or format (INT8, NVFP4) for a quantized one");
  }
  if (dense) {
    const std::optional<DataType> type = DataTypeFromProto(header.dtype());
    if (!type || (*type != DataType::kFloat32 && *type != DataType::kFloat16 &&
                  *type != DataType::kBFloat16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.dtype ", ProtoDataTypeName(header.dtype()),
          " is not kept; expected FLOAT32, FLOAT16 or BFLOAT16 (quantized weights use format)"));
    }
    spec.dtype = *type;
    return spec;
  }
  spec.quantized = true;
  switch (header.format()) {
    case gemm::v1::QUANT_FORMAT_INT8:
      spec.format = QuantFormat::kInt8;
      break;
    case gemm::v1::QUANT_FORMAT_NVFP4:
      spec.format = QuantFormat::kNvfp4;
      spec.tensor_scale = header.tensor_scale();
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "header.format ", header.format(), " is not a QuantFormat; expected INT8 or NVFP4"));
  }
  return spec;
}

TensorUploadCall::TensorUploadCall(TensorStore* store, ServerMetrics* metrics,
                                   grpc::GenericCallbackServerContext* context, std::string tenant)
    : store_(store),
      metrics_(metrics),
      context_(context),
      tenant_(std::move(tenant)),
      started_(absl::Now()) {
  if (store_ == nullptr) {
    End(absl::FailedPreconditionError(
        "this server keeps no resident tensors (--tensor_store_bytes=0)"));
    return;
  }
  StartRead(&chunk_);
}

void TensorUploadCall::OnReadDone(bool ok) {
  const absl::Status status = ok ? Consume() : Complete();
  if (!status.ok() || !ok) {
    End(status);
    return;
  }
  StartRead(&chunk_);
}

absl::Status TensorUploadCall::Consume() {
  ++chunks_;
  std::vector<grpc::Slice> slices;
  if (grpc::Status s = chunk_.Dump(&slices); !s.ok()) {
    return absl::InternalError(absl::StrCat("reading chunk ", chunks_, ": ", s.error_message()));
  }
  chunk_.Clear();
  wire::ByteRuns runs;
  for (const grpc::Slice& slice : slices) {
    runs.Append(absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()));
  }
  wire::TensorChunkWire chunk;
  if (absl::Status s = wire::ParseTensorChunk(runs, &chunk); !s.ok()) return s;
  const int64_t bytes = static_cast<int64_t>(chunk.data.size() + chunk.scales.size());
  if (bytes > kMaxTensorChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunks_, " carries ", bytes,
                                                   " bytes of data and scales; at most ",
                                                   kMaxTensorChunkBytes, " per chunk"));
  }
  if (chunks_ == 1) {
    if (!chunk.has_header) {
      return absl::InvalidArgumentError(
          "the first chunk has no header; it must say what the tensor is (shape and dtype, or "
          "shape, format and tensor_scale)");
    }
    if (absl::Status s = BeginFrom(chunk.header); !s.ok()) return s;
  } else if (chunk.has_header) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", chunks_, " has a header; only the first chunk carries one"));
  }
  if (upload_ == nullptr) {  // a tensor opened for parts
    if (bytes > 0) {
      return absl::InvalidArgumentError(
          "a header with parts opens the tensor; its bytes go in each part's own stream "
          "(header.part_of and header.part)");
    }
    return absl::OkStatus();
  }
  return upload_->AppendRuns(chunk.data.runs(), chunk.scales.runs());
}

absl::Status TensorUploadCall::BeginFrom(const gemm::v1::TensorHeader& header) {
  if (header.has_part_of()) {
    if (header.shape_size() > 0 || header.parts() > 0) {
      return absl::InvalidArgumentError(
          "a part's header carries part_of and part only; the tensor's shape was given when it "
          "was opened");
    }
    absl::StatusOr<std::unique_ptr<TensorStore::Upload>> part =
        store_->BeginPart(header.part_of().handle(), static_cast<int>(header.part()), tenant_);
    if (!part.ok()) return part.status();
    upload_ = *std::move(part);
    return absl::OkStatus();
  }
  absl::StatusOr<TensorSpec> spec = SpecFromHeader(header);
  if (!spec.ok()) return spec.status();
  const absl::Duration ttl = absl::Seconds(header.ttl_s());
  if (header.parts() >= 2) {
    absl::StatusOr<std::string> handle =
        store_->OpenParts(*spec, ttl, header.label(), static_cast<int>(header.parts()), tenant_);
    if (!handle.ok()) return handle.status();
    opened_ = *std::move(handle);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<TensorStore::Upload>> upload =
      store_->Begin(*spec, ttl, header.label(), tenant_);
  if (!upload.ok()) return upload.status();
  upload_ = *std::move(upload);
  return absl::OkStatus();
}

absl::Status TensorUploadCall::Complete() {
  // A client that went away leaves nothing behind, even with every byte sent.
  if (context_->IsCancelled()) {
    return absl::CancelledError("the client cancelled the upload; nothing was stored");
  }
  if (chunks_ == 0) {
    return absl::InvalidArgumentError("the stream ended before its first chunk (the header)");
  }
  std::string handle = opened_;
  if (upload_ != nullptr) {
    absl::StatusOr<std::string> finished = upload_->Finish();
    if (!finished.ok()) return finished.status();
    handle = *std::move(finished);
    if (metrics_ != nullptr) metrics_->ObserveUpload(upload_->bytes_written(), absl::Now() - started_);
  }
  gemm::v1::TensorHandle reply;
  reply.set_handle(handle);
  const std::string bytes = reply.SerializeAsString();
  grpc::Slice slice(bytes);
  response_ = grpc::ByteBuffer(&slice, 1);
  return absl::OkStatus();
}

void TensorUploadCall::End(const absl::Status& status) {
  code_ = status.code();
  // An unfinished upload goes now: its memory is free before the client hears why.
  if (!status.ok()) upload_.reset();
  if (status.ok()) {
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  } else {
    Finish(ToGrpcStatus(status));
  }
}

void TensorUploadCall::OnDone() {
  upload_.reset();  // cancelled mid-stream: nothing stays
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(RpcMethod::kPutTensor, PrecisionLabel::None(), code_, tenant_);
    metrics_->ObservePhase(RpcMethod::kPutTensor, Phase::kTotal, absl::Now() - started_);
  }
  delete this;
}

}  // namespace gemmd
