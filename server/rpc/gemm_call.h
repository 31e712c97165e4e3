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
//      under --max_inflight_bytes, parsed, validated and prepared (gemm_request.h), its
//      result buffer reserved, its job queued.
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

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "server/rpc/call_registry.h"
#include "server/rpc/call_report.h"
#include "server/rpc/gemm_request.h"
#include "server/rpc/host_memory.h"
#include "server/rpc/tenant_budget.h"
#include "server/scheduling/job_executor.h"
#include "server/scheduling/thread_pool.h"

namespace gemmd {

// What every call of a server shares; owned by the service, outlives its calls.
struct GemmCallEnvironment {
  GemmRequestContext request;  // limits, the backend's kernel catalogue, the memory cap
  JobExecutor* executor = nullptr;
  ServerMetrics* metrics = nullptr;
  CallRegistry* registry = nullptr;
  const CallReporter* reporter = nullptr;
  // Calls admitted at their headers whose job is not yet queued (JobExecutor::CheckRoom
  // bounds them), so a crowd of callers is refused before their requests are read.
  std::atomic<int64_t>* arriving = nullptr;
  // Host memory per tenant (--tenant_max_inflight_bytes).
  TenantBudget* tenant_budget = nullptr;
  // Where requests larger than prepare_inline_max_bytes are prepared (payload copies,
  // dequantization), so gRPC's callback thread goes back to other calls; smaller ones
  // are prepared on that thread, where a hop would cost more than the work. -1 (or no
  // pool): every request on gRPC's threads.
  ThreadPool* preparers = nullptr;
  int64_t prepare_inline_max_bytes = int64_t{1} << 20;
};

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
  // From the read request to a queued job.
  absl::Status PrepareAndSubmit();
  void JobDone(const GemmRequest& request, const absl::Status& status, const JobResult& result);
  void FinishWith(const absl::Status& status);
  void LeaveArriving();

  const GemmCallEnvironment* const env_;
  grpc::GenericCallbackServerContext* const context_;
  const RpcMethod method_;
  const std::string tenant_;
  // When the request was read (the headers, until then): timings count from here.
  absl::Time received_;
  bool arriving_ = false;     // holds a place in env_->arriving
  bool registered_ = false;

  // What the call was finished with (written before Finish, read in OnDone).
  absl::Status status_;
  // The handle of a C kept resident (keep_c), committed before the answer is sent.
  std::string kept_handle_;

  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
  // The request object until it is queued; from then on the executor owns it and hands
  // it back to JobDone (through the job's `done`) before letting it go.
  std::unique_ptr<GemmRequest> request_;
  PrecisionLabel label_ = PrecisionLabel::None();
  int64_t input_bytes_ = 0;   // for the metrics of a call that succeeded
  int64_t output_bytes_ = 0;
  int64_t tenant_charged_ = 0;  // to tenant_budget, released when the call is done
  std::unique_ptr<HostBuffer> result_;
};

// A call to a method this server does not have: UNIMPLEMENTED, naming it (capped).
grpc::ServerGenericBidiReactor* UnimplementedCall(grpc::GenericCallbackServerContext* context);
// A call refused at its headers with `status` (e.g. UNAUTHENTICATED), without reading it.
grpc::ServerGenericBidiReactor* RefusedCall(const absl::Status& status);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_CALL_H_
