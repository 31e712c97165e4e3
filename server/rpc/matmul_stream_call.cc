#include "server/rpc/matmul_stream_call.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/wire/stream_wire.h"
#include "server/rpc/gemm_exchange.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/request_phases.h"

namespace gemmd {

// One request of the stream, from its read to its settlement.
struct MatmulStreamCall::Request {
  Request(const GemmCallEnvironment* env, RpcMethod method, std::string tenant, uint64_t id)
      : id(id), exchange(env, method, std::move(tenant)) {}
  const uint64_t id;
  GemmExchange exchange;
  absl::Status status;    // its answer
  grpc::ByteBuffer bytes;  // the StreamResponse carrying it
};

MatmulStreamCall::MatmulStreamCall(const GemmCallEnvironment* env,
                                   grpc::GenericCallbackServerContext* context, std::string tenant)
    : env_(env),
      context_(context),
      tenant_(std::move(tenant)),
      peer_(context->peer()),
      opened_(absl::Now()) {
  env_->metrics->AddOpenStreams(1);
  const absl::Status entered = env_->registry->Enter(this, false, [this] { OnDraining(); });
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (entered.ok()) {
      registered_ = true;
    } else {
      finish_status_ = entered;
      finished_ = true;
      next.finish = true;
      next.finish_status = entered;
    }
    if (!next.finish) next = DecideLocked();
  }
  Start(next);
}

MatmulStreamCall::Next MatmulStreamCall::DecideLocked() {
  Next next;
  if (finished_) return next;
  if (writing_ == nullptr && !answers_.empty()) {
    writing_ = answers_.front();
    answers_.pop_front();
    next.write = &writing_->bytes;
    next.write_buffered = !answers_.empty();
  }
  if (!reading_ && !read_closed_ && !draining_ && !cancelled_ &&
      outstanding_ < env_->stream_max_outstanding) {
    reading_ = true;
    next.read = true;
  }
  if (outstanding_ == 0 && (read_closed_ || draining_ || cancelled_)) {
    finished_ = true;
    finish_status_ = cancelled_ ? absl::CancelledError("the stream was cancelled")
                                : absl::OkStatus();
    next.finish = true;
    next.finish_status = finish_status_;
    next.read = false;
  }
  return next;
}

void MatmulStreamCall::Start(const Next& next) {
  if (next.write != nullptr) {
    grpc::WriteOptions options;
    if (next.write_buffered) options.set_buffer_hint();
    StartWrite(next.write, options);
  }
  if (next.read) StartRead(&read_bytes_);
  if (next.finish) Finish(ToGrpcStatus(next.finish_status));
}

void MatmulStreamCall::OnReadDone(bool ok) {
  const absl::Time read_at = absl::Now();
  std::vector<grpc::Slice> slices;
  // A message gRPC cannot hand over counts as a request with no bytes (it cannot parse).
  if (ok && !read_bytes_.Dump(&slices).ok()) slices.clear();
  const size_t size = read_bytes_.Length();
  read_bytes_.Clear();
  Next next;
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    if (!ok) {
      read_closed_ = true;
    } else if (finished_ || cancelled_) {
      ok = false;  // read after the end: never accepted, never answered
    } else {
      ++outstanding_;  // from here it is answered, whatever happens
    }
    next = DecideLocked();
  }
  Start(next);  // the next read starts before this request is served
  if (!ok) return;
  const int64_t inline_max = env_->prepare_inline_max_bytes;
  if (env_->preparers != nullptr && inline_max >= 0 && static_cast<int64_t>(size) > inline_max) {
    env_->preparers->Schedule(
        [this, read_at, slices = std::move(slices)]() mutable { Serve(read_at, std::move(slices)); });
    return;
  }
  Serve(read_at, std::move(slices));
}

void MatmulStreamCall::Serve(absl::Time read_at, std::vector<grpc::Slice> slices) {
  wire::ByteRuns runs;
  for (const grpc::Slice& slice : slices) {
    runs.Append(absl::string_view(reinterpret_cast<const char*>(slice.begin()), slice.size()));
  }
  wire::StreamRequestWire envelope;
  absl::Status status = wire::ParseStreamRequest(runs, &envelope);
  if (status.ok() && envelope.call == wire::StreamCall::kNone) {
    status = absl::InvalidArgumentError(
        "the stream request carries no call: set matmul or quantized");
  }
  const RpcMethod method = envelope.call == wire::StreamCall::kQuantized
                               ? RpcMethod::kQuantizedMatmul
                               : RpcMethod::kMatmul;
  auto* request = new Request(env_, method, tenant_, envelope.id);
  request->exchange.set_received(read_at);
  if (status.ok()) {
    Received received;
    received.slices = std::move(slices);
    received.runs = envelope.body;  // views into the slices, which move with them
    status = Submit(request, read_at, envelope.timeout_us, std::move(received));
  }
  if (!status.ok()) {
    request->exchange.LeaveArriving();
    Answer(request, status, grpc::ByteBuffer());
  }
}

absl::Status MatmulStreamCall::Submit(Request* request, absl::Time read_at, uint64_t timeout_us,
                                      Received received) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return absl::UnavailableError("server is shutting down");
  }
  absl::StatusOr<Reservation> reserved =
      ReserveReceived(env_->request, static_cast<int64_t>(received.runs.size()));
  if (!reserved.ok()) return reserved.status();
  received.reservation = *std::move(reserved);
  if (absl::Status s = request->exchange.Admit(); !s.ok()) return s;
  absl::Time deadline = DeadlineOf(*context_);
  if (timeout_us > 0) {
    deadline = std::min(deadline, read_at + absl::Microseconds(static_cast<int64_t>(
                                                std::min<uint64_t>(timeout_us, INT64_MAX / 2))));
  }
  grpc::GenericCallbackServerContext* context = context_;
  return request->exchange.Submit(
      std::move(received), deadline, [context] { return context->IsCancelled(); },
      [this, request](const absl::Status& status, grpc::ByteBuffer response) {
        Answer(request, status, std::move(response));
      });
}

void MatmulStreamCall::Answer(Request* request, const absl::Status& answered,
                              grpc::ByteBuffer response) {
  absl::Status status = answered;
  std::vector<grpc::Slice> result;
  if (status.ok() && !response.Dump(&result).ok()) {
    status = absl::InternalError("the response could not be read back for the stream");
    result.clear();
  }
  request->status = status;
  const grpc::Status on_wire = ToGrpcStatus(status);
  std::optional<size_t> result_bytes;
  if (status.ok()) result_bytes = response.Length();
  std::vector<grpc::Slice> slices;
  slices.reserve(result.size() + 1);
  slices.emplace_back(wire::StreamResponseHead(request->id, on_wire.error_code(),
                                               on_wire.error_message(), result_bytes));
  for (grpc::Slice& slice : result) slices.push_back(std::move(slice));
  request->bytes = grpc::ByteBuffer(slices.data(), slices.size());
  Advance([&] { answers_.push_back(request); });
}

void MatmulStreamCall::OnWriteDone(bool ok) {
  Request* written = nullptr;
  {
    absl::MutexLock lock(&mu_);
    written = writing_;
    writing_ = nullptr;
  }
  // What the client got: the answer, or none when the stream broke first.
  const absl::Status outcome =
      ok ? written->status
         : absl::CancelledError(absl::StrCat(
               "the stream ended before the answer was sent; the server's answer was: ",
               written->status.ok() ? "OK" : written->status.message()));
  written->exchange.Settle(outcome, peer_);
  env_->metrics->RecordStreamRequest(outcome.code());
  delete written;
  Advance([&] { --outstanding_; });
}

void MatmulStreamCall::OnCancel() {
  Advance([&] { cancelled_ = true; });
}

void MatmulStreamCall::OnDraining() {
  Advance([&] { draining_ = true; });
}

void MatmulStreamCall::Advance(absl::FunctionRef<void()> change) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    change();
    next = DecideLocked();
  }
  Start(next);
}

void MatmulStreamCall::OnDone() {
  absl::Status finished;
  {
    absl::MutexLock lock(&mu_);
    finished = finish_status_;
  }
  const absl::Time now = absl::Now();
  env_->reporter->Report(RpcMethod::kMatmulStream, PrecisionLabel::None(),
                         ClientOutcome(*context_, finished, now), tenant_, peer_,
                         now - opened_);
  env_->metrics->AddOpenStreams(-1);
  if (registered_) env_->registry->Leave(this);
  delete this;  // nothing of it is left: it finished with no request outstanding
}

}  // namespace gemmd
