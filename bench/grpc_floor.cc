// grpc-floor: the yardstick for what gRPC itself costs. A minimal server of gemmd's API
// (gemm.v1.GemmService) that answers Matmul with a C of the right size (zeros) without
// computing anything, reading the request and writing the response the way gemm-server
// does (raw bytes, tensors located in the received slices, C sent as a slice of a buffer
// kept for the process). GetServerInfo answers with no limits, so `gemm-cli bench`
// drives it exactly like gemm-server; a benchmark that runs both says how close the
// service comes to the transport's own cost for that payload.
//
// It serves on gRPC's callback API by default; --api async on the completion-queue API
// (--threads polling threads), as gemm-server does. Both serve MatmulStream too (each
// Matmul inside answered the same way), the floor of `gemm-cli bench --stream`. With
// --api async, --callback_methods adds what gemm-server had beside its queues before
// every method moved onto them (the other methods on the callback API), and
// --notify_when_done what it has (each call's done notice), so each can be priced.
// On --api async it also answers what a striped call asks of the tensor store (PutTensor,
// a Matmul by handle keeping C, GetTensor of row ranges, DeleteTensor) with no bytes kept
// (floor_tensors.h): the floor of `gemm-cli bench --stripes N`; with --copy_payloads each
// uploaded chunk's bytes are also copied once out of gRPC's buffers, the least a server
// that keeps them does (gemm-server copies them into page-locked memory for the DMA).
//
// Usage: grpc-floor [--port 50779 (0: any free port, printed)] [--grpc_arg name=value,...]
//                   [--api callback|async] [--threads 8] [--notify_when_done]
//                   [--callback_methods] [--copy_payloads]
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/floor_tensors.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/proto_types.h"
#include "proto/transport_arguments.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/stream_wire.h"

namespace {

grpc::ByteBuffer Serialized(const google::protobuf::Message& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::Status AnswerMatmul(const gemmd::wire::ByteRuns& runs, grpc::ByteBuffer* response);

// The answer to one request of `method`: OK with `response` filled, or the error.
grpc::Status Answer(const std::string& method, grpc::ByteBuffer* request,
                    grpc::ByteBuffer* response) {
  if (method == "/gemm.v1.GemmService/GetServerInfo") {
    gemm::v1::ServerInfo info;
    info.set_version("grpc-floor");
    info.set_backend("none");
    info.mutable_limits()->set_max_message_bytes(int64_t{1} << 40);
    info.mutable_limits()->set_max_elements(int64_t{1} << 40);
    *response = Serialized(info);
    return grpc::Status::OK;
  }
  if (method == "/gemm.v1.GemmService/DeleteTensor") {
    return gemmd::floor::AnswerDeleteTensor(request, response);
  }
  if (method != "/gemm.v1.GemmService/Matmul") {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "grpc-floor answers Matmul, MatmulStream, DeleteTensor and (--api "
                        "async) PutTensor and GetTensor only");
  }
  std::vector<grpc::Slice> slices;
  (void)request->Dump(&slices);
  gemmd::wire::ByteRuns runs;
  for (const grpc::Slice& s : slices) {
    runs.Append(absl::string_view(reinterpret_cast<const char*>(s.begin()), s.size()));
  }
  return AnswerMatmul(runs, response);
}

// A Matmul request's bytes answered: C of the right size, zeros.
grpc::Status AnswerMatmul(const gemmd::wire::ByteRuns& runs, grpc::ByteBuffer* response) {
  gemmd::wire::MatmulRequestWire parsed;
  if (absl::Status s = gemmd::wire::ParseMatmulRequest(runs, &parsed); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(s.message()));
  }
  const gemm::v1::MatmulRequest& r = parsed.head;
  // An operand by handle has the shape it was put with (floor_tensors.h).
  std::optional<gemm::v1::TensorHeader> a_kept, b_kept;
  if (r.has_a_ref() && !(a_kept = gemmd::floor::FindTensor(r.a_ref().handle()))) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "a_ref: no such tensor");
  }
  if (r.has_b_ref() && !(b_kept = gemmd::floor::FindTensor(r.b_ref().handle()))) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "b_ref: no such tensor");
  }
  const auto& a = a_kept ? a_kept->shape() : r.a().shape();
  const auto& b = b_kept ? b_kept->shape() : r.b().shape();
  if (a.size() < 2 || b.size() < 2) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a and b need rank 2 or 3");
  }
  const int64_t m = r.transpose_a() ? a[a.size() - 1] : a[a.size() - 2];
  const int64_t n = r.transpose_b() ? b[b.size() - 2] : b[b.size() - 1];
  const int64_t batch = std::max<int64_t>(a.size() == 3 ? a[0] : 1, b.size() == 3 ? b[0] : 1);
  const std::optional<gemmd::DataType> type = gemmd::DataTypeFromProto(r.output_dtype());
  const size_t element = type ? gemmd::DataTypeSize(*type) : 4;
  gemm::v1::Tensor c_head;
  if (batch > 1 || a.size() == 3 || b.size() == 3) c_head.add_shape(batch);
  c_head.add_shape(m);
  c_head.add_shape(n);
  c_head.set_dtype(type ? r.output_dtype() : gemm::v1::DATA_TYPE_FLOAT32);
  gemm::v1::MatmulResponse rest;
  rest.set_kernel("none (grpc-floor)");
  rest.set_device("none");
  // No computing, but no trust either: C's size comes from the client.
  if (m < 1 || n < 1 || batch < 1 || m > (1 << 20) || n > (1 << 20) || batch > (1 << 20) ||
      batch * m * n > (int64_t{1} << 32)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "C's dimensions must be in [1, 2^20] and its elements at most 2^32");
  }
  // A kept C: its shape and dtype remembered and its handle answered, no data.
  if (r.has_keep_c()) {
    gemm::v1::TensorHeader kept;
    *kept.mutable_shape() = c_head.shape();
    kept.set_dtype(c_head.dtype());
    rest.mutable_c_ref()->set_handle(gemmd::floor::KeepTensor(kept));
  }
  const size_t c_bytes = r.has_keep_c() ? 0 : static_cast<size_t>(batch * m * n) * element;
  const grpc::Slice c = c_bytes > 0 ? gemmd::floor::Zeros(c_bytes) : grpc::Slice();
  const gemmd::wire::EncodedMessage message = gemmd::wire::EncodeMatmulResponse(
      c_head, absl::string_view(reinterpret_cast<const char*>(c.begin()), c.size()), rest);
  std::vector<grpc::Slice> out;
  for (const gemmd::wire::EncodedMessage::Piece& piece : message.pieces()) {
    out.push_back(piece.is_payload ? c : grpc::Slice(piece.owned));
  }
  *response = grpc::ByteBuffer(out.data(), out.size());
  return grpc::Status::OK;
}

// One StreamResponse's bytes.
struct StreamAnswer {
  std::vector<grpc::Slice> slices;
  size_t length = 0;
};

StreamAnswer AnswerStreamed(const absl::Status& parsed,
                            const gemmd::wire::StreamRequestWire& envelope) {
  grpc::Status status;
  if (!parsed.ok()) {
    status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(parsed.message()));
  } else if (envelope.call != gemmd::wire::StreamCall::kMatmul) {
    status = grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "grpc-floor streams Matmul only");
  }
  grpc::ByteBuffer result;
  if (status.ok()) status = AnswerMatmul(envelope.body, &result);
  StreamAnswer answer;
  std::optional<size_t> result_bytes;
  if (status.ok()) result_bytes = result.Length();
  answer.slices.emplace_back(gemmd::wire::StreamResponseHead(envelope.id, status.error_code(),
                                                             status.error_message(), result_bytes));
  std::vector<grpc::Slice> tail;
  if (status.ok()) (void)result.Dump(&tail);
  for (grpc::Slice& slice : tail) answer.slices.push_back(std::move(slice));
  for (const grpc::Slice& slice : answer.slices) answer.length += slice.size();
  return answer;
}

// The answers to the StreamRequest `request`: one, or one per element of its batch.
void AnswerStreamRequest(grpc::ByteBuffer* request, std::deque<StreamAnswer>* answers) {
  std::vector<grpc::Slice> slices;
  (void)request->Dump(&slices);
  request->Clear();
  gemmd::wire::ByteRuns runs;
  for (const grpc::Slice& s : slices) {
    runs.Append(absl::string_view(reinterpret_cast<const char*>(s.begin()), s.size()));
  }
  gemmd::wire::StreamRequestWire envelope;
  const absl::Status parsed = gemmd::wire::ParseStreamRequest(runs, &envelope);
  if (!parsed.ok() || envelope.batch.empty()) {
    answers->push_back(AnswerStreamed(parsed, envelope));
    return;
  }
  for (const gemmd::wire::ByteRuns& element : envelope.batch) {
    gemmd::wire::StreamRequestWire one;
    const absl::Status s = gemmd::wire::ParseStreamRequest(element, &one);
    answers->push_back(AnswerStreamed(s, one));
  }
}

// The next message of a stream: as many queued answers as one takes (a batch, up to
// kStreamBatchBytes), taken off `queued`; a buffer hint when more wait.
grpc::ByteBuffer NextStreamMessage(std::deque<StreamAnswer>* queued, grpc::WriteOptions* options) {
  std::vector<grpc::Slice> slices;
  const size_t taken = gemmd::wire::StreamBatchTake(
      queued->size(), [queued](size_t i) { return (*queued)[i].length; });
  for (size_t i = 0; i < taken; ++i) {
    StreamAnswer& answer = queued->front();
    if (taken > 1) slices.emplace_back(gemmd::wire::StreamBatchElementHead(answer.length));
    for (grpc::Slice& slice : answer.slices) slices.push_back(std::move(slice));
    queued->pop_front();
  }
  if (!queued->empty()) options->set_buffer_hint();
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// --copy_payloads: each PutTensor chunk's bytes are copied out of gRPC's buffers once.
bool copy_payloads = false;

// Answers a stream lets wait before it reads no more.
constexpr size_t kMaxQueuedAnswers = 256;

// One call on the callback API (as gemm-server): read the request, answer at once.
class FloorCall final : public grpc::ServerGenericBidiReactor {
 public:
  explicit FloorCall(grpc::GenericCallbackServerContext* context) : method_(context->method()) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"));
      return;
    }
    const grpc::Status status = Answer(method_, &request_, &response_);
    if (status.ok()) {
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      Finish(status);
    }
  }

  void OnDone() override { delete this; }

 private:
  const std::string method_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

// One call on the completion-queue API (--api async): the same answer, driven by
// threads polling their own queues, with no callback executor between; a MatmulStream
// is answered as on the callback API (FloorStreamCall), on the call's queue. With
// --notify_when_done it also asks for gRPC's notice that the call is over
// (AsyncNotifyWhenDone), as gemm-server's calls do, and lets go after both that notice
// and its Finish: the price of that one more event a call. A queue has one poller, so
// a call's events never run at once.
class AsyncFloorCall {
 public:
  AsyncFloorCall(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* cq,
                 bool notify_when_done)
      : service_(service), cq_(cq), notify_(notify_when_done), stream_(&context_) {
    if (notify_) context_.AsyncNotifyWhenDone(&over_);
    service_->RequestCall(&context_, &stream_, cq_, cq_, &step_);
  }

  // A tag from the queue: a step of the call, or its notice that it is over.
  static void Proceed(void* tag, bool ok) {
    const Tag* t = static_cast<const Tag*>(tag);
    switch (t->kind) {
      case Tag::kOver:
        t->call->Release();
        return;
      case Tag::kWritten:
        t->call->Written();
        return;
      case Tag::kStep:
        t->call->Step(ok);
        return;
    }
  }

 private:
  struct Tag {
    enum Kind { kStep, kOver, kWritten };
    AsyncFloorCall* call;
    Kind kind;
  };
  enum class State { kRequested, kReading, kStreaming, kUploading, kDownloading, kFinishing };

  void Step(bool ok) {
    switch (state_) {
      case State::kRequested:
        if (!ok) {  // shutting down: no call came, so no notice will
          delete this;
          return;
        }
        new AsyncFloorCall(service_, cq_, notify_);  // the next call on this queue
        state_ = context_.method() == "/gemm.v1.GemmService/MatmulStream" ? State::kStreaming
                 : context_.method() == "/gemm.v1.GemmService/PutTensor"  ? State::kUploading
                                                                          : State::kReading;
        stream_.Read(&request_, &step_);
        return;
      case State::kStreaming:
        StreamRead(ok);
        return;
      case State::kUploading:
        UploadRead(ok);
        return;
      case State::kDownloading:
        Downloaded(ok);
        return;
      case State::kReading: {
        state_ = State::kFinishing;
        if (ok && context_.method() == "/gemm.v1.GemmService/GetTensor") {
          StartDownload();
          return;
        }
        const grpc::Status status =
            ok ? Answer(context_.method(), &request_, &response_)
               : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message");
        if (status.ok()) {
          stream_.WriteAndFinish(response_, grpc::WriteOptions(), grpc::Status::OK, &step_);
        } else {
          stream_.Finish(status, &step_);
        }
        return;
      }
      case State::kFinishing:
        Release();
        return;
    }
  }

  void Release() {
    if (--holds_ == 0) delete this;
  }

  // A PutTensor chunk read (ok) or the stream's end: the answer decided by the first
  // chunk, the others dropped, and sent once the stream ends (a refused first chunk ends
  // the call at once, as gemm-server's does).
  void UploadRead(bool ok) {
    if (ok) {
      if (copy_payloads) {
        if (grpc::Status s = gemmd::floor::CopyChunkPayload(&request_); !s.ok()) {
          state_ = State::kFinishing;
          stream_.Finish(s, &step_);
          return;
        }
      }
      if (!answered_) {
        answered_ = true;
        const grpc::Status status = gemmd::floor::AnswerPutTensor(&request_, &response_);
        if (!status.ok()) {
          state_ = State::kFinishing;
          stream_.Finish(status, &step_);
          return;
        }
      }
      request_.Clear();
      stream_.Read(&request_, &step_);
      return;
    }
    state_ = State::kFinishing;
    if (!answered_) {
      stream_.Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no chunk"), &step_);
    } else {
      stream_.WriteAndFinish(response_, grpc::WriteOptions(), grpc::Status::OK, &step_);
    }
  }

  // GetTensor's request read: its chunks written one after another, then OK.
  void StartDownload() {
    const grpc::Status status = gemmd::floor::AnswerGetTensor(&request_, &chunks_);
    if (!status.ok()) {
      stream_.Finish(status, &step_);
      return;
    }
    state_ = State::kDownloading;
    next_chunk_ = 0;
    stream_.Write(chunks_[0], &step_);
  }

  void Downloaded(bool ok) {
    if (ok && ++next_chunk_ < chunks_.size()) {
      stream_.Write(chunks_[next_chunk_], &step_);
      return;
    }
    state_ = State::kFinishing;
    stream_.Finish(
        ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"),
        &step_);
  }

  // A stream's read done: its answers queued, written when no write is in flight, and the
  // next read started while fewer than kMaxQueuedAnswers wait.
  void StreamRead(bool ok) {
    if (!ok) {
      read_done_ = true;
      if (!writing_ && queued_.empty()) FinishStream();
      return;
    }
    AnswerStreamRequest(&request_, &queued_);
    if (!writing_) WriteNext();
    reading_ = queued_.size() < kMaxQueuedAnswers;
    if (reading_) stream_.Read(&request_, &step_);
  }

  void Written() {
    writing_ = false;
    if (!queued_.empty()) {
      WriteNext();
    } else if (read_done_) {
      FinishStream();
      return;
    }
    if (!reading_ && !read_done_ && queued_.size() < kMaxQueuedAnswers) {
      reading_ = true;
      stream_.Read(&request_, &step_);
    }
  }

  void WriteNext() {
    grpc::WriteOptions options;
    response_ = NextStreamMessage(&queued_, &options);
    writing_ = true;
    stream_.Write(response_, options, &written_);
  }

  void FinishStream() {
    state_ = State::kFinishing;
    stream_.Finish(grpc::Status::OK, &step_);
  }

  grpc::AsyncGenericService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  const bool notify_;
  Tag step_{this, Tag::kStep};
  Tag over_{this, Tag::kOver};
  Tag written_{this, Tag::kWritten};
  int holds_ = notify_ ? 2 : 1;  // the finish, and the notice when asked for
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  State state_ = State::kRequested;
  // A stream's (one poller runs all of a call's events: no lock).
  std::deque<StreamAnswer> queued_;
  bool writing_ = false, reading_ = true, read_done_ = false;
  // An upload's (PutTensor) and a download's (GetTensor).
  bool answered_ = false;  // the first chunk read, response_ holds the answer
  std::vector<grpc::ByteBuffer> chunks_;
  size_t next_chunk_ = 0;
};

// MatmulStream on the callback API, as gemm-server serves it: one read at a time, each
// Matmul inside answered at once (its own status in the envelope; a batch's each on its
// own), and every answer ready when a write starts written in that one message (a batch,
// up to kStreamBatchBytes); at most kMaxQueuedAnswers wait before reading pauses.
class FloorStreamCall final : public grpc::ServerGenericBidiReactor {
 public:
  FloorStreamCall() { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        read_done_ = true;
        finish = !writing_ && queued_.empty();
        finished_ = finish;
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    std::deque<StreamAnswer> answers;
    AnswerStreamRequest(&request_, &answers);
    bool write = false, read_more = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (StreamAnswer& answer : answers) queued_.push_back(std::move(answer));
      write = !writing_;
      writing_ = true;
      read_more = queued_.size() < kMaxQueuedAnswers;
      reading_ = read_more;
    }
    if (write) WriteQueued();
    if (read_more) StartRead(&request_);
  }

  void OnWriteDone(bool /*ok*/) override {
    bool write = false, read_more = false, finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queued_.empty()) {
        write = true;
      } else {
        writing_ = false;
        finish = read_done_ && !finished_;
        finished_ = finished_ || finish;
      }
      if (!reading_ && !read_done_ && queued_.size() < kMaxQueuedAnswers) {
        read_more = reading_ = true;
      }
    }
    if (write) WriteQueued();
    if (read_more) StartRead(&request_);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  // The queued answers, as many as one message takes, in one write.
  void WriteQueued() {
    grpc::WriteOptions options;
    {
      std::lock_guard<std::mutex> lock(mu_);
      response_ = NextStreamMessage(&queued_, &options);
    }
    StartWrite(&response_, options);
  }

  grpc::ByteBuffer request_;   // touched by OnReadDone only
  grpc::ByteBuffer response_;  // the message being written (touched between writes only)
  std::mutex mu_;
  std::deque<StreamAnswer> queued_;  // answers not yet in a write
  bool writing_ = false, reading_ = true, read_done_ = false, finished_ = false;
};

class FloorService final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    if (context->method() == "/gemm.v1.GemmService/MatmulStream") return new FloorStreamCall();
    return new FloorCall(context);
  }
};

}  // namespace

int main(int argc, char** argv) {
  // As gemm-server: keep freed memory mapped (fresh receive buffers fault on every page).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // As gemm-server: no absl::Mutex deadlock detector (Debian's abseil is built without
  // NDEBUG; the detector serializes every gRPC lock on one global lock). The floor is
  // gRPC's own cost, not the detector's.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  int port = 50779;
  int threads = 8;
  bool notify_when_done = false;
  bool callback_methods = false;
  std::string grpc_arg;
  std::string api = "callback";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      port = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--grpc_arg") == 0 && i + 1 < argc) {
      grpc_arg = argv[++i];
    } else if (std::strcmp(argv[i], "--api") == 0 && i + 1 < argc) {
      api = argv[++i];
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--notify_when_done") == 0) {
      notify_when_done = true;
    } else if (std::strcmp(argv[i], "--callback_methods") == 0) {
      callback_methods = true;
    } else if (std::strcmp(argv[i], "--copy_payloads") == 0) {
      copy_payloads = true;
    } else {
      std::fprintf(stderr,
                   "usage: grpc-floor [--port 50779 (0: any)] [--grpc_arg name=value,...] "
                   "[--api callback|async] [--threads 8] [--notify_when_done] "
                   "[--callback_methods] [--copy_payloads]\n"
                   "A gemm.v1 server that answers Matmul with zeros of C's size without "
                   "computing: what gRPC itself costs for a payload. --notify_when_done "
                   "(async API): each call also asks for gRPC's notice that it is over, as "
                   "gemm-server's do. --callback_methods (async API): the service's other "
                   "methods on the callback API, as gemm-server has them (here those the floor "
                   "does not answer, each UNIMPLEMENTED), so gRPC's callback threads run "
                   "beside the queues. On the async API it also serves striped calls "
                   "(PutTensor, Matmul by handle with keep_c, GetTensor, DeleteTensor), keeping "
                   "tensors' shapes and none of their bytes; --copy_payloads copies each "
                   "uploaded chunk's bytes once out of gRPC's buffers, as a server that stores "
                   "them must.\n");
      return 2;
    }
  }
  absl::StatusOr<gemmd::GrpcArgs> extra = gemmd::ParseGrpcArgs(grpc_arg);
  if (!extra.ok()) {
    std::fprintf(stderr, "grpc-floor: %s\n", std::string(extra.status().message()).c_str());
    return 2;
  }
  if (api != "callback" && api != "async") {
    std::fprintf(stderr, "grpc-floor: --api is callback or async\n");
    return 2;
  }
  FloorService service;
  grpc::AsyncGenericService async_service;
  gemm::v1::GemmService::WithGenericMethod_Matmul<
      gemm::v1::GemmService::WithGenericMethod_QuantizedMatmul<
          gemm::v1::GemmService::WithGenericMethod_GetServerInfo<
              gemm::v1::GemmService::CallbackService>>>
      other_methods;  // what the floor answers stays on the queues
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  grpc::ServerBuilder builder;
  int listening = 0;  // the port bound (--port 0: one the system picked)
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                           &listening);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  if (api == "callback") {
    builder.RegisterCallbackGenericService(&service);
  } else {
    builder.RegisterAsyncGenericService(&async_service);
    if (callback_methods) builder.RegisterService(&other_methods);
    for (int i = 0; i < threads; ++i) queues.push_back(builder.AddCompletionQueue());
  }
  gemmd::SetTransportArguments(&builder, *extra);  // as gemm-server
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || listening == 0) {
    std::fprintf(stderr, "grpc-floor: cannot listen on 127.0.0.1:%d\n", port);
    return 1;
  }
  std::printf("grpc-floor on 127.0.0.1:%d (%s API)\n", listening, api.c_str());
  std::fflush(stdout);
  std::vector<std::thread> pollers;
  for (auto& cq : queues) {
    grpc::ServerCompletionQueue* queue = cq.get();
    for (int i = 0; i < 64; ++i) new AsyncFloorCall(&async_service, queue, notify_when_done);
    pollers.emplace_back([queue] {
      void* tag = nullptr;
      bool ok = false;
      while (queue->Next(&tag, &ok)) AsyncFloorCall::Proceed(tag, ok);
    });
  }
  server->Wait();
  for (auto& t : pollers) t.join();
  return 0;
}
