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
  absl::Status status;  // its answer
  // The StreamResponse carrying it.
  std::vector<grpc::Slice> bytes;
  size_t length = 0;
};

namespace {

// The slices that hold `runs` (views into them): what one request of a batched message
// keeps alive.
std::vector<grpc::Slice> SlicesUnder(const std::vector<grpc::Slice>& slices,
                                     const wire::ByteRuns& runs) {
  std::vector<grpc::Slice> out;
  for (const grpc::Slice& slice : slices) {
    const char* begin = reinterpret_cast<const char*>(slice.begin());
    const char* end = begin + slice.size();
    for (absl::string_view run : runs.runs()) {
      if (run.data() < end && run.data() + run.size() > begin) {
        out.push_back(slice);
        break;
      }
    }
  }
  return out;
}

}  // namespace

MatmulStreamCall::MatmulStreamCall(const GemmCallEnvironment* env, QueuedCall* call,
                                   std::string tenant)
    : QueuedReactor(call),
      env_(env),
      context_(&context()),
      tenant_(std::move(tenant)),
      peer_(context_->peer()),
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
  if (writing_.empty() && !answers_.empty()) {
    // Every answer ready goes in this message, up to wire::kStreamBatchBytes.
    const std::deque<Request*>& ready = answers_;
    const size_t taken =
        wire::StreamBatchTake(ready.size(), [&ready](size_t i) { return ready[i]->length; });
    writing_.assign(answers_.begin(), answers_.begin() + static_cast<std::ptrdiff_t>(taken));
    answers_.erase(answers_.begin(), answers_.begin() + static_cast<std::ptrdiff_t>(taken));
    next.write = writing_;
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
  if (!next.write.empty()) {
    // One answer goes as itself; several as the elements of one batch.
    std::vector<grpc::Slice> slices;
    for (const Request* answer : next.write) {
      if (next.write.size() > 1) slices.emplace_back(wire::StreamBatchElementHead(answer->length));
      slices.insert(slices.end(), answer->bytes.begin(), answer->bytes.end());
    }
    write_bytes_ = grpc::ByteBuffer(slices.data(), slices.size());
    grpc::WriteOptions options;
    if (next.write_buffered) options.set_buffer_hint();
    StartWrite(&write_bytes_, options);
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
  const absl::Status parsed = wire::ParseStreamRequest(runs, &envelope);
  if (!parsed.ok() || envelope.batch.empty()) {
    ServeOne(read_at, std::move(slices), parsed, envelope);
    return;
  }
  // The message counted as one request when it was read: it is as many as its batch.
  if (envelope.batch.size() > 1) {
    Advance([&] { outstanding_ += static_cast<int>(envelope.batch.size()) - 1; });
  }
  for (const wire::ByteRuns& element : envelope.batch) {
    wire::StreamRequestWire request;
    absl::Status status = wire::ParseStreamRequest(element, &request);
    if (status.ok() && !request.batch.empty()) {
      status = absl::InvalidArgumentError(
          "a request in a batch carries a batch of its own; batches do not nest");
    }
    ServeOne(read_at, SlicesUnder(slices, element), status, request);
  }
}

void MatmulStreamCall::ServeOne(absl::Time read_at, std::vector<grpc::Slice> slices,
                                absl::Status parsed, const wire::StreamRequestWire& envelope) {
  absl::Status status = std::move(parsed);
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
  grpc::GenericServerContext* context = context_;
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
  request->bytes.reserve(result.size() + 1);
  request->bytes.emplace_back(wire::StreamResponseHead(request->id, on_wire.error_code(),
                                                       on_wire.error_message(), result_bytes));
  for (grpc::Slice& slice : result) request->bytes.push_back(std::move(slice));
  for (const grpc::Slice& slice : request->bytes) request->length += slice.size();
  Advance([&] { answers_.push_back(request); });
}

void MatmulStreamCall::OnWriteDone(bool ok) {
  // gRPC is done with the message: let it go while no other write can start (writing_
  // is still taken).
  write_bytes_.Clear();
  std::vector<Request*> written;
  {
    absl::MutexLock lock(&mu_);
    written.swap(writing_);
  }
  for (Request* answer : written) {
    // What the client got: the answer, or none when the stream broke first.
    const absl::Status outcome =
        ok ? answer->status
           : absl::CancelledError(absl::StrCat(
                 "the stream ended before the answer was sent; the server's answer was: ",
                 answer->status.ok() ? "OK" : answer->status.message()));
    answer->exchange.Settle(outcome, peer_);
    env_->metrics->RecordStreamRequest(outcome.code());
    delete answer;
  }
  Advance([&] { outstanding_ -= static_cast<int>(written.size()); });
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
