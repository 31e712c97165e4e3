#include "server/rpc/tensor_upload_call.h"

#include <grpcpp/support/slice.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/wire/gemm_wire.h"
#include "server/observability/log.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"

namespace gemmd {
namespace {

int64_t NowNanos() { return absl::ToUnixNanos(absl::Now()); }

}  // namespace

TensorUploadCall::TensorUploadCall(const TensorCallEnvironment* env, QueuedCall* call,
                                   std::string tenant)
    : QueuedReactor(call),
      env_(env),
      context_(&context()),
      tenant_(std::move(tenant)),
      started_(absl::Now()),
      last_activity_ns_(NowNanos()),
      sequence_(env->store, tenant_, env->regions) {
  env_->metrics->AddInflight(1);
  absl::Status admitted = env_->registry->Enter(
      this, env_->registry->draining() && ContinuesACall(*context_, env_->store, tenant_));
  registered_ = admitted.ok();
  if (admitted.ok() && env_->store == nullptr) {
    admitted = absl::FailedPreconditionError(
        "this server keeps no resident tensors (--tensor_store_bytes=0)");
  }
  if (!admitted.ok()) {
    bool end;
    {
      absl::MutexLock lock(&mu_);
      end = EndLocked(admitted);
    }
    if (end) SendEnd();
    return;
  }
  env_->upload_watch->Add(this);
  watched_ = true;
  StartRead(&chunk_);
}

absl::Time TensorUploadCall::last_activity() const {
  return absl::FromUnixNanos(last_activity_ns_.load(std::memory_order_relaxed));
}

void TensorUploadCall::OnReadDone(bool ok) {
  last_activity_ns_.store(NowNanos(), std::memory_order_relaxed);
  bool end = false;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;  // ended while this chunk was on its way (idle, say)
    const absl::Status status = ok ? Consume() : Complete();
    if (!status.ok() || !ok) end = EndLocked(status);
  }
  if (end) {
    SendEnd();
    return;
  }
  StartRead(&chunk_);
}

void TensorUploadCall::EndIdle(absl::Duration idle) {
  bool end;
  {
    absl::MutexLock lock(&mu_);
    end = EndLocked(absl::DeadlineExceededError(absl::StrCat(
        "the upload sent nothing for ",
        absl::FormatDuration(absl::Trunc(idle, absl::Milliseconds(1))),
        " (--upload_idle_timeout_s=", absl::ToDoubleSeconds(env_->upload_watch->timeout()),
        "); nothing was stored")));
  }
  if (end) SendEnd();
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
  if (!sequence_.opened_parts()) {
    env_->metrics->ObserveUpload(sequence_.bytes_written(), absl::Now() - started_);
  }
  gemm::v1::PutTensorResponse reply;
  reply.set_handle(*handle);
  // Where it went, so a client can put the tensors one GEMM reads on one device.
  absl::StatusOr<std::string> device = env_->store->DeviceOf(*handle, tenant_);
  if (device.ok()) reply.set_device(*std::move(device));
  answered_handle_ = *std::move(handle);
  grpc::Slice slice(reply.SerializeAsString());
  response_ = grpc::ByteBuffer(&slice, 1);
  return absl::OkStatus();
}

bool TensorUploadCall::EndLocked(const absl::Status& status) {
  if (ended_) return false;
  ended_ = true;
  status_ = status;
  if (!status.ok()) {
    // An unfinished upload goes now: its room is free before the client hears why.
    if (sequence_.in_progress()) {
      Log(LogLevel::kWarning, "tensor_upload_aborted",
          {{"handle", sequence_.handle()},
           {"tenant", tenant_},
           {"bytes_received", absl::StrCat(sequence_.bytes_written())},
           {"code", absl::StatusCodeToString(status.code())},
           {"peer", context_->peer()}});
    }
    sequence_.Abandon();
  }
  return true;
}

void TensorUploadCall::SendEnd() {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = status_;
  }
  if (status.ok()) {
    FinishWith(&response_, grpc::Status::OK);
  } else {
    Finish(ToGrpcStatus(status));
  }
}

void TensorUploadCall::OnDone() {
  if (watched_) env_->upload_watch->Remove(this);
  const absl::Time now = absl::Now();
  absl::Status answered;
  {
    absl::MutexLock lock(&mu_);
    if (!ended_) {
      // gRPC ended the call without a last read (the connection went): nothing stays.
      EndLocked(absl::CancelledError("the call ended before the upload completed"));
    }
    answered = status_;
  }
  const absl::Status outcome = ClientOutcome(*context_, answered, now);
  if (answered.ok() && !outcome.ok()) {
    // Stored, but the client never got the handle: nobody could use or delete it (for a
    // part: the client takes the whole upload as failed, as a failed part does).
    Log(LogLevel::kWarning, "tensor_upload_aborted",
        {{"handle", answered_handle_},
         {"tenant", tenant_},
         {"code", absl::StatusCodeToString(outcome.code())},
         {"why", "the client did not get the answer"},
         {"peer", context_->peer()}});
    env_->store->Delete(answered_handle_, tenant_).IgnoreError();
  }
  env_->reporter->Report(RpcMethod::kPutTensor, PrecisionLabel::None(), outcome, tenant_,
                         context_->peer(), now - started_);
  env_->metrics->AddInflight(-1);
  if (registered_) env_->registry->Leave(this);
  Unref();
}

void TensorUploadCall::Unref() {
  if (refs_.fetch_sub(1) == 1) delete this;
}

}  // namespace gemmd
