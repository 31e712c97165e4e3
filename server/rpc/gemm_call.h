// One Matmul or QuantizedMatmul call, from its headers to the last byte of its response,
// on gRPC's completion-queue API with raw bytes (the async generic service: gRPC hands
// the call over when its headers arrive, before the request is read; gemm_call_queues.h
// polls the queues).
//
// Why not the generated unary handler: that one runs only after gRPC has read the whole
// request, so an overloaded or draining server can refuse only after buffering it, and
// its response is a message gRPC serializes into a second copy of C. Why the
// completion-queue API and not the callback one (which the other methods use): a unary
// call costs fewer CPU cycles there (no hop through gRPC's callback executor), and
// small calls are bound by that cost. Here:
//   1. headers: refused at once (UNAVAILABLE while draining or with no healthy device,
//      RESOURCE_EXHAUSTED when the queue, the calls still arriving or the memory cap are
//      at their limits; UNAUTHENTICATED; UNIMPLEMENTED for a method this server does not
//      have), before a byte of the request is read; otherwise it reads.
//   2. request read: its size checked against --max_message_bytes, its bytes reserved
//      under --max_inflight_bytes, then prepared and queued (gemm_exchange.h).
//   3. job done: C goes out as a slice of the result buffer (response_encoding.h); the
//      buffer and its reservation are released when gRPC lets go of the slice.
//   4. done (the Finish operation and gRPC's notice that the call is over, whichever
//      comes last): the call is counted once by what the client got (a call the client
//      gave up on is DEADLINE_EXCEEDED or CANCELLED, and no bytes count as sent for it),
//      and failures are logged (rate-limited). A C kept resident for a call whose client
//      did not get the answer is deleted: nobody holds its handle.
// A drain (CallRegistry) refuses calls that arrive after it; this one, once its headers
// are in, is served to its end.
//
// Owns itself: created waiting for a call on one queue (Await), deleted when that call
// is over (or, at shutdown, when the wait is called off).
#ifndef GEMMD_SERVER_RPC_GEMM_CALL_H_
#define GEMMD_SERVER_RPC_GEMM_CALL_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/gemm_call_environment.h"
#include "server/rpc/gemm_exchange.h"

namespace gemmd {

// What every call waiting on the queues shares; outlives them.
struct GemmCallSetup {
  grpc::AsyncGenericService* service = nullptr;
  const GemmCallEnvironment* env = nullptr;
  const CallAuth* auth = nullptr;
};

class GemmCall {
 public:
  // One of a call's operations, as a completion-queue tag.
  struct Tag {
    enum Kind { kStarted, kRead, kFinished, kOver };
    GemmCall* call;
    Kind kind;
  };

  // Waits for the next call on `queue` (its events come back there as Tags).
  static void Await(const GemmCallSetup* setup, grpc::ServerCompletionQueue* queue);

  // What the queue returned for `tag` (its poller's thread).
  static void Proceed(void* tag, bool ok);

 private:
  GemmCall(const GemmCallSetup* setup, grpc::ServerCompletionQueue* queue);
  ~GemmCall() = default;

  void Started();
  // Admission at the headers: OK to read the request.
  absl::Status Admit();
  void Read(bool ok);
  // Prepares the read request and queues its job, or answers the call with why not.
  // Touches nothing of the call once the job is queued: the job may finish, and the call
  // end, at once.
  void Prepare();
  void Answer(const absl::Status& status, grpc::ByteBuffer response);
  void FinishWith(const absl::Status& status);
  // The Finish operation, or the notice that the call is over: the second ends it.
  void LetGo();

  const GemmCallSetup* const setup_;
  grpc::ServerCompletionQueue* const queue_;
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_{&context_};
  Tag started_{this, Tag::kStarted};
  Tag read_{this, Tag::kRead};
  Tag finished_{this, Tag::kFinished};
  Tag over_{this, Tag::kOver};
  // The Finish operation and the notice that the call is over, once the call started.
  std::atomic<int> holds_{2};
  // Set when the call is a Matmul or QuantizedMatmul of a known tenant.
  std::optional<GemmExchange> exchange_;
  bool registered_ = false;
  // What the call was finished with (written before Finish, read in LetGo).
  absl::Status status_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_CALL_H_
