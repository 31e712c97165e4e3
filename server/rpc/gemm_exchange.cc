#include "server/rpc/gemm_exchange.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/proto_types.h"
#include "server/observability/log.h"
#include "server/rpc/region_payloads.h"
#include "server/rpc/response_encoding.h"

namespace gemmd {
namespace {

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

}  // namespace

GemmExchange::GemmExchange(const GemmCallEnvironment* env, RpcMethod method, std::string tenant)
    : env_(env), method_(method), tenant_(std::move(tenant)), received_(absl::Now()) {
  env_->metrics->AddInflight(1);
}

GemmExchange::~GemmExchange() {
  if (!settled_) Settle(absl::CancelledError("the request was dropped unanswered"), "");
}

absl::Status GemmExchange::Admit() {
  // Count ourselves first, so concurrent arrivals see each other.
  const int64_t others = env_->arriving->fetch_add(1);
  arriving_ = true;
  if (absl::Status s = env_->executor->CheckRoom(others); !s.ok()) return s;
  if (absl::Status s = env_->tenant_budget->CheckRoom(tenant_); !s.ok()) return s;
  if (env_->request.memory->Full()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: requests hold ", env_->request.memory->reserved_bytes(),
        " bytes (--max_inflight_bytes=", env_->request.memory->max_bytes(), "); retry later"));
  }
  return absl::OkStatus();
}

void GemmExchange::LeaveArriving() {
  if (arriving_) env_->arriving->fetch_sub(1);
  arriving_ = false;
}

absl::Status GemmExchange::Submit(Received received, absl::Time deadline,
                                  std::function<bool()> is_cancelled, Done done) {
  absl::Status status =
      PrepareAndQueue(std::move(received), deadline, std::move(is_cancelled), std::move(done));
  if (!status.ok()) {
    LeaveArriving();  // at once: a refused request must not crowd out the next one
    result_.reset();
  }
  return status;
}

absl::Status GemmExchange::PrepareAndQueue(Received received, absl::Time deadline,
                                           std::function<bool()> is_cancelled, Done done) {
  const GemmRequestContext& ctx = env_->request;
  auto request = std::make_unique<GemmRequest>();
  GemmRequest& r = *request;
  r.tenant = tenant_;
  // The tenant's share: the received request now, the result once its size is known.
  const int64_t wire_bytes = received.reservation.bytes();
  if (absl::Status s = env_->tenant_budget->Charge(tenant_, wire_bytes); !s.ok()) return s;
  tenant_charged_ = wire_bytes;
  if (absl::Status s = PrepareReceived(ctx, method_, std::move(received), &r, &label_); !s.ok()) {
    return s;
  }
  input_bytes_ = r.input_bytes;
  output_bytes_ = r.output_bytes;
  if (absl::Status s = env_->tenant_budget->Charge(tenant_, r.output_bytes); !s.ok()) return s;
  tenant_charged_ += r.output_bytes;

  absl::StatusOr<std::unique_ptr<HostBuffer>> result =
      ctx.memory->AcquireBuffer(static_cast<size_t>(r.output_bytes));
  if (!result.ok()) return result.status();
  result_ = *std::move(result);

  SetResultDestination(ctx, result_->data(), &r);
  r.accepted = absl::Now();  // queue time starts once the operands are ready
  r.deadline = deadline;
  r.is_cancelled = std::move(is_cancelled);
  GemmRequest* queued = &r;
  r.done = [this, queued, done = std::move(done)](const absl::Status& status,
                                                   const JobResult& result) {
    JobDone(*queued, status, result, done);
  };
  // No longer arriving: from here the queue counts it (or refuses it). Leaving first can
  // only let a concurrent arrival through to Submit, which still checks.
  LeaveArriving();
  std::unique_ptr<Job> job = std::move(request);
  // Refused: the job (and what it holds) goes here; `done` has not run.
  return env_->executor->Submit(&job);
}

void GemmExchange::JobDone(const GemmRequest& r, const absl::Status& job_status,
                           const JobResult& result, const Done& done) {
  // A region truncated or unregistered under the job: what it read or wrote there is
  // not the caller's any more.
  const absl::Status status = job_status.ok() ? CheckRegionsIntact(r.regions) : job_status;
  grpc::ByteBuffer response;
  if (status.ok()) {
    gemm::v1::Tensor c_head;
    for (int64_t dim : r.output_shape) c_head.add_shape(dim);
    c_head.set_dtype(DataTypeToProto(r.problem.c_type));
    gemm::v1::MatmulResponse rest;
    rest.set_kernel(std::string(result.kernel->name()));  // the one that ran
    rest.set_device(result.device);
    rest.set_precision(PrecisionToProto(r.problem.precision));
    gemm::v1::Timing* timing = rest.mutable_timing();
    timing->set_queue_us(Micros(result.queue));
    timing->set_copy_in_us(Micros(r.prepare + result.copy_in));
    timing->set_compute_us(Micros(result.compute));
    timing->set_copy_out_us(Micros(result.copy_out));
    timing->set_total_us(Micros(absl::Now() - received_));
    timing->set_batch_size(result.batch_size);
    if (r.problem.plan_m > 0) {  // followed: the client may rely on the whole call's bits
      rest.mutable_row_plan()->set_rows(r.problem.plan_m);
      rest.mutable_row_plan()->set_offset(r.problem.plan_row0);
    }
    ServerMetrics* m = env_->metrics;
    m->ObservePhase(method_, Phase::kQueue, result.queue);
    m->ObservePhase(method_, Phase::kCopyIn, r.prepare + result.copy_in);
    m->ObservePhase(method_, Phase::kCompute, result.compute);
    m->ObservePhase(method_, Phase::kCopyOut, result.copy_out);
    if (r.kept_c != nullptr) {
      // C stays: the response names it instead of carrying it.
      absl::StatusOr<std::string> handle = env_->request.store->Commit(r.kept_c);
      if (handle.ok()) kept_handle_ = *handle;
      rest.mutable_c_ref()->set_handle(kept_handle_);
    }
    response = EncodeMatmulResponse(c_head, std::move(result_), rest);
  }
  // The request itself (message, operands) goes when the executor lets go of it, right
  // after this returns.
  result_.reset();  // an error carries no result
  done(status, std::move(response));
}

void GemmExchange::Settle(const absl::Status& outcome, const std::string& peer) {
  if (settled_) return;
  settled_ = true;
  if (!outcome.ok() && !kept_handle_.empty()) {
    // The client never got the handle: nobody could use or delete the kept C.
    Log(LogLevel::kInfo, "kept_result_dropped",
        {{"handle", kept_handle_}, {"why", absl::StatusCodeToString(outcome.code())}});
    env_->request.store->Delete(kept_handle_, tenant_).IgnoreError();
  }
  env_->reporter->Report(method_, label_, outcome, tenant_, peer, absl::Now() - received_);
  if (outcome.ok()) {
    env_->metrics->AddBytesReceived(input_bytes_);
    env_->metrics->AddBytesSent(output_bytes_);
  }
  LeaveArriving();
  env_->tenant_budget->Release(tenant_, tenant_charged_);
  tenant_charged_ = 0;
  env_->metrics->AddInflight(-1);
}

}  // namespace gemmd
