#include "server/rpc/gemm_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/proto_types.h"
#include "server/observability/client_text.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/region_payloads.h"
#include "server/rpc/response_encoding.h"

namespace gemmd {
namespace {

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

const char* RequestTypeName(RpcMethod method) {
  return method == RpcMethod::kMatmul ? "gemm.v1.MatmulRequest"
                                      : "gemm.v1.QuantizedMatmulRequest";
}

}  // namespace

GemmCall::GemmCall(const GemmCallEnvironment* env, grpc::GenericCallbackServerContext* context,
                   RpcMethod method, std::string tenant)
    : env_(env),
      context_(context),
      method_(method),
      tenant_(std::move(tenant)),
      received_(absl::Now()) {
  env_->metrics->AddInflight(1);
  const absl::Status admitted = Admit();
  if (admitted.ok()) {
    StartRead(&request_bytes_);
  } else {
    LeaveArriving();  // at once: a refused call must not crowd out the next one
    FinishWith(admitted);
  }
}

absl::Status GemmCall::Admit() {
  const bool continues = env_->registry->draining() &&
                         ContinuesACall(*context_, env_->request.store, tenant_);
  if (absl::Status s = env_->registry->Enter(this, continues); !s.ok()) return s;
  registered_ = true;
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

void GemmCall::LeaveArriving() {
  if (arriving_) env_->arriving->fetch_sub(1);
  arriving_ = false;
}

void GemmCall::FinishWith(const absl::Status& status) {
  status_ = status;
  Finish(ToGrpcStatus(status));
}

void GemmCall::OnReadDone(bool ok) {
  received_ = absl::Now();
  if (!ok) {
    // No message: the client went away, or half-closed without sending one.
    LeaveArriving();
    FinishWith(context_->IsCancelled()
                   ? absl::CancelledError("the call ended before its request arrived")
                   : absl::InvalidArgumentError(absl::StrCat(
                         "the call carried no request message; expected one ",
                         RequestTypeName(method_))));
    return;
  }
  const int64_t inline_max = env_->prepare_inline_max_bytes;
  if (env_->preparers != nullptr && inline_max >= 0 &&
      static_cast<int64_t>(request_bytes_.Length()) > inline_max) {
    // The call stays open (nothing has finished it) until Prepare answers or queues it.
    env_->preparers->Schedule([this] { Prepare(); });
    return;
  }
  Prepare();
}

void GemmCall::Prepare() {
  const absl::Status status = PrepareAndSubmit();
  if (status.ok()) return;  // queued: the job's `done` answers it
  LeaveArriving();
  request_.reset();  // not queued: the request and what it holds go now
  result_.reset();
  FinishWith(status);
}

absl::Status GemmCall::PrepareAndSubmit() {
  const GemmRequestContext& ctx = env_->request;
  request_ = std::make_unique<GemmRequest>();
  GemmRequest& r = *request_;
  r.tenant = tenant_;
  // The tenant's share: the received request now, the result once its size is known.
  const int64_t wire_bytes = static_cast<int64_t>(request_bytes_.Length());
  if (absl::Status s = env_->tenant_budget->Charge(tenant_, wire_bytes); !s.ok()) return s;
  tenant_charged_ = wire_bytes;
  if (absl::Status s = PrepareRequest(ctx, method_, &request_bytes_, &r, &label_); !s.ok()) {
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
  r.deadline = DeadlineOf(*context_);
  grpc::GenericCallbackServerContext* context = context_;
  r.is_cancelled = [context] { return context->IsCancelled(); };
  GemmRequest* queued = request_.get();
  r.done = [this, queued](const absl::Status& status, const JobResult& result) {
    JobDone(*queued, status, result);
  };
  // No longer arriving: from here the queue counts it (or refuses it). Leaving first can
  // only let a concurrent arrival through to Submit, which still checks.
  LeaveArriving();
  std::unique_ptr<Job> job = std::move(request_);
  absl::Status submitted = env_->executor->Submit(&job);
  // Refused: the request is still this call's, which answers it.
  if (!submitted.ok()) request_.reset(static_cast<GemmRequest*>(job.release()));
  return submitted;
}

void GemmCall::JobDone(const GemmRequest& r, const absl::Status& job_status,
                       const JobResult& result) {
  // A region truncated or unregistered under the job: what it read or wrote there is
  // not the caller's any more.
  const absl::Status status = job_status.ok() ? CheckRegionsIntact(r.regions) : job_status;
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
    response_bytes_ = EncodeMatmulResponse(c_head, std::move(result_), rest);
  }
  // The request itself (message, operands) goes when the executor lets go of it, right
  // after this returns.
  result_.reset();  // an error carries no result
  if (status.ok()) {
    status_ = status;
    StartWriteAndFinish(&response_bytes_, grpc::WriteOptions(), grpc::Status::OK);
  } else {
    FinishWith(status);
  }
}

void GemmCall::OnDone() {
  const absl::Time now = absl::Now();
  const absl::Status outcome = ClientOutcome(*context_, status_, now);
  if (!outcome.ok() && !kept_handle_.empty()) {
    // The client never got the handle: nobody could use or delete the kept C.
    Log(LogLevel::kInfo, "kept_result_dropped",
        {{"handle", kept_handle_}, {"why", absl::StatusCodeToString(outcome.code())}});
    env_->request.store->Delete(kept_handle_, tenant_).IgnoreError();
  }
  env_->reporter->Report(method_, label_, outcome, tenant_, context_->peer(), now - received_);
  if (outcome.ok()) {
    env_->metrics->AddBytesReceived(input_bytes_);
    env_->metrics->AddBytesSent(output_bytes_);
  }
  LeaveArriving();
  env_->tenant_budget->Release(tenant_, tenant_charged_);
  // Counted out before leaving the registry: a drain or a test that sees the registry
  // empty then reads the gauge at 0.
  env_->metrics->AddInflight(-1);
  if (registered_) env_->registry->Leave(this);
  delete this;
}

grpc::ServerGenericBidiReactor* UnimplementedCall(grpc::GenericCallbackServerContext* context) {
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const std::string& method) {
      Finish(ToGrpcStatus(
          absl::UnimplementedError(absl::StrCat("unknown method ", ClientText(method)))));
    }
    void OnDone() override { delete this; }
  };
  return new Reactor(context->method());
}

grpc::ServerGenericBidiReactor* RefusedCall(const absl::Status& status) {
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
    void OnDone() override { delete this; }
  };
  return new Reactor(status);
}

}  // namespace gemmd
