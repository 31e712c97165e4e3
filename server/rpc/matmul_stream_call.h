// One MatmulStream: many Matmul / QuantizedMatmul requests on one gRPC stream, each a
// GemmExchange of its own (gemm_exchange.h), answered on its own, by id, as it completes.
// A stream message costs the server far less than a unary call (no call set-up,
// headers, trailers or completion per request), and a caller keeps many in flight on it.
//
//   reading   one message at a time; the next read starts as soon as a message is
//             taken, so one request is prepared while the next arrives. With
//             stream_max_outstanding requests read and not yet answered it reads no more:
//             HTTP/2 flow control then holds the sender back, so a stream that sends
//             faster than it reads its answers costs the server a bounded amount.
//   requests  each checked (--max_message_bytes) and reserved (--max_inflight_bytes),
//             its envelope parsed, then admitted, prepared and queued like a unary call
//             (the queue, the tenant's budget and host memory count it). Every refusal is
//             that request's answer: a message that does not parse is INVALID_ARGUMENT
//             (with id 0 when even its id is unreadable). Its deadline is the earlier of
//             the stream's and its own timeout_us.
//   batches   a message may carry a batch of requests (StreamRequest.batch): each is
//             served as if it came alone, and counts as outstanding on its own.
//   answers   written one message at a time, in the order they complete: every answer
//             ready when a write starts goes in it (a StreamResponse batch, up to
//             wire::kStreamBatchBytes; one alone goes as itself), so answers that complete
//             together (one launch's) cost the stream one message. A request is settled
//             (counted, its memory and budget given back) once its answer is written or
//             the stream has failed.
//   the end   when the client has closed its side and every request read is answered:
//             OK. Cancelled (the client went, or the stream's deadline passed): queued
//             jobs see it and are dropped, every request is settled, then the call ends.
//   draining  the server's drain stops the reading; requests read are answered (those
//             read after the drain began: UNAVAILABLE), then the stream ends OK. Requests
//             the client sent that were not read get no answer: the client's library
//             fails them UNAVAILABLE, to be sent again elsewhere.
// Owns itself: created by the service per stream, deleted once gRPC is done with it and
// no request of it is left (OnDone).
#ifndef GEMMD_SERVER_RPC_MATMUL_STREAM_CALL_H_
#define GEMMD_SERVER_RPC_MATMUL_STREAM_CALL_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/wire/stream_wire.h"
#include "server/rpc/gemm_call_environment.h"
#include "server/rpc/gemm_request.h"
#include "server/rpc/queued_call.h"

namespace gemmd {

class MatmulStreamCall final : public QueuedReactor {
 public:
  // `tenant`: the authenticated caller's ("" without authentication).
  MatmulStreamCall(const GemmCallEnvironment* env, QueuedCall* call, std::string tenant);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Request;
  // What to start once mu_ is released (gRPC's Start* and Finish are not called under it).
  struct Next {
    bool read = false;
    std::vector<Request*> write;  // the answers of the next message, if any
    bool write_buffered = false;  // more answers wait behind these
    bool finish = false;
    absl::Status finish_status;
  };

  ~MatmulStreamCall() override = default;

  // The message just read: one request, or a batch of them.
  void Serve(absl::Time read_at, std::vector<grpc::Slice> slices);
  // One request (`parsed`: its envelope's parse), from its bytes to a queued job or an
  // answer.
  void ServeOne(absl::Time read_at, std::vector<grpc::Slice> slices, absl::Status parsed,
                const wire::StreamRequestWire& envelope);
  absl::Status Submit(Request* request, absl::Time read_at, uint64_t timeout_us,
                      Received received);
  // `request`'s answer, queued for writing.
  void Answer(Request* request, const absl::Status& status, grpc::ByteBuffer response);
  void OnDraining();

  Next DecideLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Start(const Next& next);
  // `change` to the state under mu_, then what it lets start, started.
  void Advance(absl::FunctionRef<void()> change);

  const GemmCallEnvironment* const env_;
  grpc::GenericServerContext* const context_;
  const std::string tenant_;
  const std::string peer_;  // for each request's report (the context's is a new string a call)
  const absl::Time opened_;
  bool registered_ = false;
  grpc::ByteBuffer read_bytes_;  // the message being read (touched only by OnReadDone)
  // The message being written: set by Start, let go by OnWriteDone, both while writing_
  // holds the answers it carries (so no other write can start).
  grpc::ByteBuffer write_bytes_;

  mutable absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;  // the client closed, or the read failed
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;     // Finish called
  // Requests read and not yet settled (preparing, queued, answered, being written).
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Request*> answers_ ABSL_GUARDED_BY(mu_);  // ready to write, in order
  std::vector<Request*> writing_ ABSL_GUARDED_BY(mu_);  // in the message being written
  absl::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_MATMUL_STREAM_CALL_H_
