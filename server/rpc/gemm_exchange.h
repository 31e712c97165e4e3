// One Matmul or QuantizedMatmul request on the server, from its received bytes to its
// encoded answer, whichever RPC carries it: a unary call (gemm_call.h) or one message of
// a MatmulStream (matmul_stream_call.h). It holds what the request is charged (its place
// among the requests arriving, its tenant's bytes, its result buffer) and gives all of
// it back when it is settled:
//   Admit    room in the queue (counting the requests arriving), in the tenant's budget
//            and in host memory; from here it holds a place among those arriving
//   Submit   the received bytes prepared (gemm_request.h) and the job queued; `done`
//            runs once, when the job is done, with its status and (OK) the response
//   Settle   once the carrier knows what its client got: counted and logged (failures),
//            a C kept for a client that never got its handle deleted, the tenant's bytes
//            given back
// Its carrier calls it from one place at a time (`done` runs after Submit is over with
// it); not thread-safe otherwise.
#ifndef GEMMD_SERVER_RPC_GEMM_EXCHANGE_H_
#define GEMMD_SERVER_RPC_GEMM_EXCHANGE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/observability/metrics.h"
#include "server/rpc/gemm_call_environment.h"
#include "server/rpc/gemm_request.h"
#include "server/rpc/host_memory.h"
#include "server/rpc/request_phases.h"

namespace gemmd {

class GemmExchange {
 public:
  // The job's outcome, and the encoded MatmulResponse when it is OK.
  using Done = std::function<void(const absl::Status& status, grpc::ByteBuffer response)>;

  // `tenant`: the authenticated caller's ("" without authentication).
  GemmExchange(const GemmCallEnvironment* env, RpcMethod method, std::string tenant);
  ~GemmExchange();
  GemmExchange(const GemmExchange&) = delete;
  GemmExchange& operator=(const GemmExchange&) = delete;

  // RESOURCE_EXHAUSTED when the queue (with the requests arriving), the tenant's budget
  // or host memory is at its limit. Holds a place among the requests arriving (OK or
  // not) until LeaveArriving, Submit or Settle.
  absl::Status Admit();
  void LeaveArriving();

  // When the request was read: the response's total and the request's duration count
  // from here (construction until set).
  void set_received(absl::Time at) { received_ = at; }
  absl::Time received() const { return received_; }

  // Prepares `received` (its runs: the request message) and queues its job with
  // `deadline`; `is_cancelled` says when its client has gone. OK: the job is queued and
  // `done` will run, maybe before this returns; otherwise nothing was queued and `done`
  // never runs.
  absl::Status Submit(Received received, absl::Time deadline, std::function<bool()> is_cancelled,
                      Done done);

  // Counts the request by `outcome` (what its client got: the answer, or why it got
  // none) and gives back what it held. Once.
  void Settle(const absl::Status& outcome, const std::string& peer);

  RpcMethod method() const { return method_; }
  const std::string& tenant() const { return tenant_; }

 private:
  absl::Status PrepareAndQueue(Received received, absl::Time deadline,
                               std::function<bool()> is_cancelled, Done done);
  void JobDone(const GemmRequest& request, const absl::Status& status, const JobResult& result,
               const Done& done);

  const GemmCallEnvironment* const env_;
  const RpcMethod method_;
  const std::string tenant_;
  absl::Time received_;
  bool arriving_ = false;  // holds a place in env_->arriving
  bool settled_ = false;
  PrecisionLabel label_ = PrecisionLabel::None();
  int64_t input_bytes_ = 0;  // for the metrics of a request that succeeded
  int64_t output_bytes_ = 0;
  int64_t tenant_charged_ = 0;  // released by Settle
  // The handle of a C kept resident (keep_c), committed before the answer is sent.
  std::string kept_handle_;
  // C's buffer until the response owns it.
  std::unique_ptr<HostBuffer> result_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_EXCHANGE_H_
