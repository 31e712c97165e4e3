// One call of any method on gRPC's completion-queue API, as raw bytes (the async generic
// service), served by a QueuedReactor that has the shape of gRPC's callback reactors:
// StartRead, StartWrite and Finish start operations; each one's end comes back as
// OnReadDone / OnWriteDone; OnCancel once when the client has gone (cancelled, its
// deadline passed, the connection lost); OnDone last, once gRPC holds nothing of the call
// any more.
//
// Why not gRPC's callback API: a server with even one callback method runs gRPC's
// callback threads, which poll the same connections as the completion queues' threads.
// A message read on one thread is then handed to another that is asleep; where cores are
// few, small calls pay for those switches (docs/BENCHMARKS.md). With every method here,
// the thread that reads a message is the one that serves it.
//
// Every event of a call comes back on its queue's one poller thread, so a reactor's
// On* never run at once; Start* and Finish may be called from any thread (one read and
// one write at a time, nothing after Finish). Nothing runs inline in a Start*.
#ifndef GEMMD_SERVER_RPC_QUEUED_CALL_H_
#define GEMMD_SERVER_RPC_QUEUED_CALL_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemmd {

// Every tag on the server's completion queues: what its completion does (on the poller).
class QueueTag {
 public:
  virtual void Proceed(bool ok) = 0;

 protected:
  ~QueueTag() = default;
};

class QueuedCall;

class QueuedReactor {
 public:
  virtual ~QueuedReactor() = default;

  virtual void OnReadDone(bool ok) {}
  virtual void OnWriteDone(bool ok) {}
  // At most once, before OnDone.
  virtual void OnCancel() {}
  // The last event: every operation is over and the call finished. Nothing of the call
  // may be touched after (the reactor usually deletes itself here).
  virtual void OnDone() = 0;

 protected:
  // Attaches to `call`: its events come here from now on.
  explicit QueuedReactor(QueuedCall* call);

  grpc::GenericServerContext& context() const;
  // Why a read that was to bring the request (a `request_type`) brought none: the client
  // went away (CANCELLED), or half-closed without sending it (INVALID_ARGUMENT).
  absl::Status NoRequest(absl::string_view request_type) const;
  void StartRead(grpc::ByteBuffer* message);
  void StartWrite(const grpc::ByteBuffer* message, grpc::WriteOptions options = {});
  void Finish(const grpc::Status& status);
  // Finish with `message` as the last one sent (a unary or client-streaming call's
  // response): one operation, so the message and the status go out together.
  void FinishWith(const grpc::ByteBuffer* message, const grpc::Status& status);

 private:
  QueuedCall* const call_;
};

// Routes a call that has arrived (its method known, its request not read) to the reactor
// that serves it; runs on the queue's poller thread.
class CallRouter {
 public:
  virtual ~CallRouter() = default;
  // Creates the reactor for `call` (QueuedReactor's constructor attaches it), which must
  // finish it.
  virtual void Route(QueuedCall* call) = 0;
};

class QueuedCall {
 public:
  // Waits for the next call on `queue`; when one comes, the next wait is posted and the
  // call routed.
  static void Await(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* queue,
                    CallRouter* router);

  grpc::GenericServerContext& context() { return context_; }

 private:
  friend class QueuedReactor;

  struct Tag final : QueueTag {
    enum Kind { kStarted, kRead, kWritten, kFinished, kOver };
    Tag(QueuedCall* call, Kind kind) : call(call), kind(kind) {}
    void Proceed(bool ok) override { call->Proceed(kind, ok); }
    QueuedCall* const call;
    const Kind kind;
  };

  QueuedCall(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* queue,
             CallRouter* router)
      : service_(service), queue_(queue), router_(router) {}
  ~QueuedCall() = default;

  void Proceed(Tag::Kind kind, bool ok);
  // Lets go of one hold; the last one ends the call.
  void Release();

  grpc::AsyncGenericService* const service_;
  grpc::ServerCompletionQueue* const queue_;
  CallRouter* const router_;
  QueuedReactor* reactor_ = nullptr;
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_{&context_};
  Tag started_{this, Tag::kStarted};
  Tag read_{this, Tag::kRead};
  Tag written_{this, Tag::kWritten};
  Tag finished_{this, Tag::kFinished};
  Tag over_{this, Tag::kOver};
  // What keeps the call: its Finish and gRPC's notice that it is over (both from the
  // start), and each read or write in flight.
  std::atomic<int> holds_{2};
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_QUEUED_CALL_H_
