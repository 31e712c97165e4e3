// One Matmul or QuantizedMatmul call, from its headers to the last byte of its response,
// on gRPC's callback API with raw bytes (the generic service: gRPC hands the call over
// when its headers arrive, before the request is read).
//
// Why not the generated unary handler: that one runs only after gRPC has read the whole
// request, so an overloaded or draining server can refuse only after buffering it, and
// its response is a message gRPC serializes into a second copy of C. Here:
//   1. headers: refused at once (UNAVAILABLE while draining or with no healthy device,
//      RESOURCE_EXHAUSTED when the queue, the calls still arriving or the memory cap are
//      at their limits), before a byte of the request is read; otherwise it reads.
//   2. request read: its size checked against --max_message_bytes, its bytes reserved
//      under --max_inflight_bytes, then prepared and queued (gemm_exchange.h).
//   3. job done: C goes out as a slice of the result buffer (response_encoding.h); the
//      buffer and its reservation are released when gRPC lets go of the slice.
//   4. done: the call is counted once by what the client got (a call the client gave up
//      on is DEADLINE_EXCEEDED or CANCELLED, and no bytes count as sent for it), and
//      failures are logged (rate-limited). A C kept resident for a call whose client did
//      not get the answer is deleted: nobody holds its handle.
// A drain (CallRegistry) refuses calls that arrive after it; this one, once its headers
// are in, is served to its end.
//
// Owns itself: created by the service per call, deleted when gRPC reports it done.
#ifndef GEMMD_SERVER_RPC_GEMM_CALL_H_
#define GEMMD_SERVER_RPC_GEMM_CALL_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "server/observability/metrics.h"
#include "server/rpc/gemm_call_environment.h"
#include "server/rpc/gemm_exchange.h"

namespace gemmd {

class GemmCall final : public grpc::ServerGenericBidiReactor {
 public:
  // `tenant`: the authenticated caller's ("" without authentication).
  GemmCall(const GemmCallEnvironment* env, grpc::GenericCallbackServerContext* context,
           RpcMethod method, std::string tenant = "");

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
  void FinishWith(const absl::Status& status);

  const GemmCallEnvironment* const env_;
  grpc::GenericCallbackServerContext* const context_;
  const RpcMethod method_;
  GemmExchange exchange_;
  bool registered_ = false;
  // What the call was finished with (written before Finish, read in OnDone).
  absl::Status status_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
};

// A call to a method this server does not have: UNIMPLEMENTED, naming it (capped).
grpc::ServerGenericBidiReactor* UnimplementedCall(grpc::GenericCallbackServerContext* context);
// A call refused at its headers with `status` (e.g. UNAUTHENTICATED), without reading it.
grpc::ServerGenericBidiReactor* RefusedCall(const absl::Status& status);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_CALL_H_
