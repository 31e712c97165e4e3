#include "server/rpc/tensor_upload_call.h"

#include <grpcpp/support/slice.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/grpc_status.h"

namespace gemmd {

TensorUploadCall::TensorUploadCall(TensorStore* store, ServerMetrics* metrics,
                                   grpc::GenericCallbackServerContext* context, std::string tenant)
    : store_(store),
      metrics_(metrics),
      context_(context),
      tenant_(std::move(tenant)),
      started_(absl::Now()),
      sequence_(store, tenant_) {
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
  std::vector<grpc::Slice> slices;
  if (grpc::Status s = chunk_.Dump(&slices); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("reading chunk ", sequence_.chunks() + 1, ": ", s.error_message()));
  }
  chunk_.Clear();
  wire::ByteRuns runs;
  for (const grpc::Slice& slice : slices) {
    runs.Append(absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()));
  }
  return sequence_.Consume(runs);
}

absl::Status TensorUploadCall::Complete() {
  // A client that went away leaves nothing behind, even with every byte sent.
  if (context_->IsCancelled()) {
    return absl::CancelledError("the client cancelled the upload; nothing was stored");
  }
  absl::StatusOr<std::string> handle = sequence_.Complete();
  if (!handle.ok()) return handle.status();
  if (metrics_ != nullptr && !sequence_.opened_parts()) {
    metrics_->ObserveUpload(sequence_.bytes_written(), absl::Now() - started_);
  }
  gemm::v1::TensorHandle reply;
  reply.set_handle(*std::move(handle));
  const std::string bytes = reply.SerializeAsString();
  grpc::Slice slice(bytes);
  response_ = grpc::ByteBuffer(&slice, 1);
  return absl::OkStatus();
}

void TensorUploadCall::End(const absl::Status& status) {
  code_ = status.code();
  // An unfinished upload goes now: its memory is free before the client hears why.
  if (!status.ok()) sequence_.Abandon();
  if (status.ok()) {
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  } else {
    Finish(ToGrpcStatus(status));
  }
}

void TensorUploadCall::OnDone() {
  sequence_.Abandon();  // cancelled mid-stream: nothing stays
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(RpcMethod::kPutTensor, PrecisionLabel::None(), code_, tenant_);
    metrics_->ObservePhase(RpcMethod::kPutTensor, Phase::kTotal, absl::Now() - started_);
  }
  delete this;
}

}  // namespace gemmd
