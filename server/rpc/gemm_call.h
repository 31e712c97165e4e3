// One Matmul or QuantizedMatmul call, from its headers to the last byte of its response,
// on the completion queues with raw bytes (queued_call.h: the reactor is made when the
// call's headers arrive, before the request is read).
//
// Why not the generated unary handler: that one runs only after gRPC has read the whole
// request, so an overloaded or draining server can refuse only after buffering it, and
// its response is a message gRPC serializes into a second copy of C. Here:
//   1. headers: refused at once (UNAVAILABLE while draining or with no healthy device,
//      RESOURCE_EXHAUSTED when the queue, the calls still arriving or the memory cap are
//      at their limits; UNAUTHENTICATED), before a byte of the request is read;
//      otherwise it reads.
//   2. request read: its size checked against --max_message_bytes, its bytes reserved
//      under --max_inflight_bytes, then prepared and queued (gemm_exchange.h).
//   3. job done: C goes out as a slice of the result buffer (response_encoding.h); the
//      buffer and its reservation are released when gRPC lets go of the slice.
//   4. done (the call is over): the call is counted once by what the client got (a
//      call the client gave up on is DEADLINE_EXCEEDED or CANCELLED, and no bytes count
//      as sent for it), and failures are logged (rate-limited). A C kept resident for a
//      call whose client did not get the answer is deleted: nobody holds its handle.
// A drain (CallRegistry) refuses calls that arrive after it; this one, once its headers
// are in, is served to its end.
//
// Owns itself: deleted when the call is over.
#ifndef GEMMD_SERVER_RPC_GEMM_CALL_H_
#define GEMMD_SERVER_RPC_GEMM_CALL_H_

#include <grpcpp/support/byte_buffer.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/gemm_call_environment.h"
#include "server/rpc/gemm_exchange.h"
#include "server/rpc/queued_call.h"

namespace gemmd {

// What every Matmul and QuantizedMatmul call shares; outlives them.
struct GemmCallSetup {
  const GemmCallEnvironment* env = nullptr;
  const CallAuth* auth = nullptr;
};

class GemmCall final : public QueuedReactor {
 public:
  // Serves `call`, a Matmul (`method` kMatmul) or QuantizedMatmul whose headers are in.
  GemmCall(const GemmCallSetup* setup, QueuedCall* call, RpcMethod method);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  ~GemmCall() override = default;

  // Admission at the headers: OK to read the request.
  absl::Status Admit();
  // Prepares the read request and queues its job, or answers the call with why not.
  // Touches nothing of the call once the job is queued: the job may finish, and the call
  // end, at once.
  void Prepare();
  void Answer(const absl::Status& status, grpc::ByteBuffer response);
  void FinishWithStatus(const absl::Status& status);

  const GemmCallSetup* const setup_;
  // Set when the call is of a known tenant.
  std::optional<GemmExchange> exchange_;
  bool registered_ = false;
  // What the call was finished with (written before Finish, read in OnDone).
  absl::Status status_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_CALL_H_
