#include "client/matmul_stream.h"

#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/slice.h>

#include <atomic>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/request_encoding.h"
#include "proto/wire/stream_wire.h"

namespace gemmd {
namespace {

const std::string kMatmulStreamMethod = "/gemm.v1.GemmService/MatmulStream";

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

// The stream on gRPC's callback API. It lives while the caller's MatmulStream holds it
// or gRPC's call is running; the MatmulStream's Close() waits for every request to be
// gone, so it is the last to let go.
class MatmulStream::Call : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Call(std::shared_ptr<grpc::ChannelInterface> channel, const StreamOptions& options)
      : channel_(std::move(channel)), stub_(channel_), max_outstanding_(options.max_outstanding) {
    if (max_outstanding_ < 1) max_outstanding_ = 1;
    if (options.timeout != absl::InfiniteDuration()) {
      context_->set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
    }
  }

  // Starts gRPC's call; `self` keeps this alive until OnDone.
  void Open(std::shared_ptr<Call> self) {
    self_ = std::move(self);
    stub_.PrepareBidiStreamingCall(&*context_, kMatmulStreamMethod, grpc::StubOptions(), this);
    // Writes are started from callers' threads, outside gRPC's reactions: the hold keeps
    // the call from ending under them until the writing side is done (EndWrites).
    AddHold();
    StartRead(&read_);
    StartCall();
  }

  void Submit(wire::StreamCall kind, wire::EncodedMessage body, const StreamCallOptions& options,
              bool c_in_region, MatmulResult* result, std::function<void(absl::Status)> done) {
    auto* request = new Request;
    request->c_out = options.c_out;
    request->c_in_region = c_in_region;
    request->result = result;
    request->done = std::move(done);
    request->call = this;
    {
      absl::MutexLock lock(&mu_);
      ++live_requests_;
    }
    // This function's own reference: the stream may answer or fail the request (OnDone)
    // as soon as it is published below.
    request->refs.fetch_add(1, std::memory_order_relaxed);
    bool refused = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Call* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->ended_ || c->closing_ || c->outstanding_ < c->max_outstanding_;
          },
          this));
      if (ended_ || closing_) {
        refused = true;
        request->status = closing_ ? absl::FailedPreconditionError("the stream is closed")
                                   : EndStatusLocked();
      } else {
        request->id = ++last_id_;
        ++outstanding_;
        ++submitting_;
        pending_.emplace(request->id, request);
      }
    }
    if (refused) {
      request->Unref();  // the answer that will not come
      request->Unref();
      return;
    }
    const uint64_t timeout_us =
        options.timeout > absl::ZeroDuration()
            ? static_cast<uint64_t>(std::max<int64_t>(1, absl::ToInt64Microseconds(options.timeout)))
            : 0;
    const wire::EncodedMessage message =
        wire::EncodeStreamRequest(request->id, kind, timeout_us, body);
    std::vector<grpc::Slice> slices;
    slices.reserve(message.pieces().size());
    for (const wire::EncodedMessage::Piece& piece : message.pieces()) {
      if (!piece.is_payload) {
        slices.emplace_back(piece.owned);
        continue;
      }
      request->refs.fetch_add(1, std::memory_order_relaxed);
      // gRPC only reads through it; the release callback says when it has finished.
      slices.emplace_back(const_cast<char*>(piece.payload.data()), piece.payload.size(),
                          &Request::ReleasePayload, request);
    }
    Outgoing outgoing{std::move(slices), message.size()};
    bool start = false;
    {
      absl::MutexLock lock(&mu_);
      // After the stream's read side ended nothing more is sent: the end fails it.
      if (!read_ended_ && !write_failed_) {
        writes_.push_back(std::move(outgoing));
        start = !writing_;
        writing_ = true;
      }
      --submitting_;
    }
    outgoing.slices.clear();  // unsent: its slices go now (outside the lock: may run `done`)
    if (start) WriteNext();
    request->Unref();
  }

  absl::Status Close() {
    bool end_writes = false;
    {
      absl::MutexLock lock(&mu_);
      if (!closing_) {
        closing_ = true;
        // A Submit past its checks sends its request before the writing side ends.
        mu_.Await(absl::Condition(
            +[](Call* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) { return c->submitting_ == 0; },
            this));
        end_writes = !writing_;
        if (end_writes) writing_ = true;  // no write may start beside WritesDone
      }
    }
    if (end_writes) EndWrites();
    absl::MutexLock lock(&mu_);
    // Also until every request's `done` has returned: then only the caller's
    // MatmulStream holds this, so the call (and the channel it holds) goes on the caller's
    // thread, never on one of gRPC's, where a channel's last reference may not be dropped.
    mu_.Await(absl::Condition(
        +[](Call* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->done_ && c->live_requests_ == 0;
        },
        this));
    return end_status_;
  }

  int outstanding() const {
    absl::MutexLock lock(&mu_);
    return outstanding_;
  }

  // gRPC's reactions.
  void OnWriteDone(bool ok) override {
    grpc::ByteBuffer written;
    {
      absl::MutexLock lock(&mu_);
      written.Swap(&in_flight_);
      if (!ok) write_failed_ = true;
    }
    written.Clear();  // its payload slices go as gRPC lets go of them (may run `done`)
    WriteNext();
  }

  void OnWritesDoneDone(bool /*ok*/) override {}

  void OnReadDone(bool ok) override {
    if (ok) {
      Answer();
      StartRead(&read_);
      return;
    }
    // The server has finished the stream (OnDone says how): nothing more is sent.
    bool end_writes = false;
    {
      absl::MutexLock lock(&mu_);
      read_ended_ = true;
      end_writes = !writing_;
      writing_ = true;
    }
    if (end_writes) EndWrites();
  }

  void OnDone(const grpc::Status& status) override {
    std::vector<Request*> unanswered;
    std::deque<Outgoing> unsent;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      end_status_ = FromGrpc(status);
      for (auto& [id, request] : pending_) unanswered.push_back(request);
      pending_.clear();
      outstanding_ = 0;
      unsent.swap(writes_);
    }
    unsent.clear();
    const absl::Status failed = EndStatus(status);
    for (Request* request : unanswered) {
      request->status = failed;
      request->Unref();
    }
    // Payloads gRPC still holds (a retry layer's copy) are let go with the context.
    context_.reset();
    // gRPC's hold goes before done_ is set: the caller's MatmulStream holds this until
    // Close() has seen done_, so this is never the last reference.
    self_.reset();
    absl::MutexLock lock(&mu_);
    done_ = true;
  }

 private:
  // One request's StreamRequest, queued to be sent.
  struct Outgoing {
    std::vector<grpc::Slice> slices;  // its payloads reference the caller's tensors
    size_t length = 0;
  };

  struct Request {
    uint64_t id = 0;
    absl::Span<char> c_out;
    bool c_in_region = false;
    MatmulResult* result = nullptr;
    std::function<void(absl::Status)> done;
    absl::Status status;
    // The stream, which outlives its requests: Close() waits until each is gone.
    Call* call = nullptr;
    std::atomic<int> refs{1};  // the answer (or the stream's end), plus one per payload

    static void ReleasePayload(void* request) { static_cast<Request*>(request)->Unref(); }
    void Unref() {
      if (refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      std::function<void(absl::Status)> run = std::move(done);
      const absl::Status s = std::move(status);
      Call* stream = call;
      delete this;
      run(s);
      stream->RequestGone();
    }
  };

  // A request and its `done` are over.
  void RequestGone() {
    absl::MutexLock lock(&mu_);
    --live_requests_;
  }

  // The status a request gets when the stream ends without answering it.
  absl::Status EndStatus(const grpc::Status& status) const {
    if (!status.ok()) return FromGrpc(status);
    return absl::UnavailableError(
        "the server ended the stream before answering this request (it is shutting down); "
        "send it again");
  }
  absl::Status EndStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!end_status_.ok()) return end_status_;
    return absl::UnavailableError("the stream has ended; open another");
  }

  // Starts the next write: every request queued, in one message (a batch, up to
  // kStreamBatchBytes; one alone goes as itself), so requests submitted while a write is
  // in flight cost the stream one message. Once none is left and the caller has closed
  // (or the stream can send no more), WritesDone.
  void WriteNext() {
    grpc::ByteBuffer* next = nullptr;
    bool end_writes = false;
    std::deque<Outgoing> unsent;
    {
      absl::MutexLock lock(&mu_);
      if (!writes_.empty() && !write_failed_ && !read_ended_) {
        const std::deque<Outgoing>& queued = writes_;
        const size_t taken = wire::StreamBatchTake(
            queued.size(), [&queued](size_t i) { return queued[i].length; });
        std::vector<grpc::Slice> slices;
        for (size_t i = 0; i < taken; ++i) {
          Outgoing& outgoing = writes_.front();
          if (taken > 1) slices.emplace_back(wire::StreamBatchElementHead(outgoing.length));
          for (grpc::Slice& slice : outgoing.slices) slices.push_back(std::move(slice));
          writes_.pop_front();
        }
        in_flight_ = grpc::ByteBuffer(slices.data(), slices.size());
        next = &in_flight_;
      } else {
        unsent.swap(writes_);  // a failed or finished stream sends no more
        end_writes = (closing_ || write_failed_ || read_ended_) && !writes_ended_;
        writing_ = end_writes;
      }
    }
    unsent.clear();
    if (next != nullptr) {
      StartWrite(next);
    } else if (end_writes) {
      EndWrites();
    }
  }

  // The writing side is over: WritesDone, and the hold of Open released.
  void EndWrites() {
    {
      absl::MutexLock lock(&mu_);
      if (writes_ended_) return;
      writes_ended_ = true;
    }
    StartWritesDone();
    RemoveHold();
  }

  // One StreamResponse read: its request answered, or each of its batch's.
  void Answer() {
    std::vector<grpc::Slice> slices;
    wire::ByteRuns runs;
    wire::StreamResponseWire answer;
    absl::Status parsed = read_.Dump(&slices).ok()
                              ? absl::OkStatus()
                              : absl::InternalError("could not read the server's answer");
    read_.Clear();
    for (const grpc::Slice& s : slices) {
      runs.Append(absl::string_view(reinterpret_cast<const char*>(s.begin()), s.size()));
    }
    if (parsed.ok()) parsed = wire::ParseStreamResponse(runs, &answer);
    if (!parsed.ok() || answer.batch.empty()) {
      AnswerOne(parsed, answer);
      return;
    }
    for (const wire::ByteRuns& element : answer.batch) {
      wire::StreamResponseWire one;
      absl::Status s = wire::ParseStreamResponse(element, &one);
      if (s.ok() && !one.batch.empty()) s = absl::InternalError("the server nested a batch");
      AnswerOne(s, one);
    }
  }

  // The request `answer` names, answered (`parsed`: how its parse went).
  void AnswerOne(const absl::Status& parsed, const wire::StreamResponseWire& answer) {
    Request* request = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(answer.id);
      if (it == pending_.end()) return;  // not ours (or unreadable): nothing to answer
      request = it->second;
      pending_.erase(it);
      --outstanding_;
    }
    if (!parsed.ok()) {
      request->status = absl::InternalError(parsed.message());
    } else if (answer.code != 0) {
      request->status = absl::Status(static_cast<absl::StatusCode>(answer.code), answer.message);
    } else {
      request->status =
          ReadMatmulResponse(answer.result, request->c_out, request->c_in_region, request->result);
    }
    request->Unref();
  }

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  grpc::GenericStub stub_;
  std::optional<grpc::ClientContext> context_{std::in_place};
  int max_outstanding_;
  std::shared_ptr<Call> self_;  // gRPC's hold on this, until OnDone
  grpc::ByteBuffer read_;

  mutable absl::Mutex mu_;
  uint64_t last_id_ ABSL_GUARDED_BY(mu_) = 0;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int submitting_ ABSL_GUARDED_BY(mu_) = 0;  // Submits between publishing and queueing
  int live_requests_ ABSL_GUARDED_BY(mu_) = 0;  // made and not yet gone (RequestGone)
  absl::flat_hash_map<uint64_t, Request*> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> writes_ ABSL_GUARDED_BY(mu_);  // queued, not yet sent
  grpc::ByteBuffer in_flight_ ABSL_GUARDED_BY(mu_);   // the message being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a write (or WritesDone) is started
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;  // the server finished the stream
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // OnDone began
  bool done_ ABSL_GUARDED_BY(mu_) = false;   // OnDone is over
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
};

MatmulStream::MatmulStream(std::shared_ptr<grpc::ChannelInterface> channel,
                           const StreamOptions& options)
    : call_(std::make_shared<Call>(std::move(channel), options)) {
  call_->Open(call_);
}

MatmulStream::~MatmulStream() { call_->Close().IgnoreError(); }

void MatmulStream::Submit(const MatmulArgs& args, const StreamCallOptions& options,
                          MatmulResult* result, std::function<void(absl::Status)> done) {
  call_->Submit(wire::StreamCall::kMatmul, EncodeMatmulArgs(args), options, args.c_shm.set(),
                result, std::move(done));
}

void MatmulStream::Submit(const QuantizedMatmulArgs& args, const StreamCallOptions& options,
                          MatmulResult* result, std::function<void(absl::Status)> done) {
  if (absl::Status s = CheckOneA(args); !s.ok()) {
    done(std::move(s));
    return;
  }
  call_->Submit(wire::StreamCall::kQuantized, EncodeQuantizedArgs(args), options,
                args.c_shm.set(), result, std::move(done));
}

namespace {

// `submit(done)` with a `done` that fulfils the returned future.
template <typename SubmitWith>
std::future<absl::Status> AsFuture(SubmitWith submit) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  submit([promise](absl::Status s) { promise->set_value(std::move(s)); });
  return future;
}

}  // namespace

std::future<absl::Status> MatmulStream::Submit(const MatmulArgs& args,
                                               const StreamCallOptions& options,
                                               MatmulResult* result) {
  return AsFuture([&](std::function<void(absl::Status)> done) {
    Submit(args, options, result, std::move(done));
  });
}

std::future<absl::Status> MatmulStream::Submit(const QuantizedMatmulArgs& args,
                                               const StreamCallOptions& options,
                                               MatmulResult* result) {
  return AsFuture([&](std::function<void(absl::Status)> done) {
    Submit(args, options, result, std::move(done));
  });
}

absl::Status MatmulStream::Close() { return call_->Close(); }

int MatmulStream::outstanding() const { return call_->outstanding(); }

}  // namespace gemmd
