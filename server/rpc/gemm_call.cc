#include "server/rpc/gemm_call.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/proto_types.h"
#include "server/rpc/client_text.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/response_encoding.h"

namespace gemmd {
namespace {

absl::Time DeadlineOf(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

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
  absl::MutexLock lock(&mu_);
  if (state_ != State::kReceiving) {  // a drain has answered it already
    LeaveArriving();
    return;
  }
  if (admitted.ok()) {
    StartRead(&request_bytes_);
  } else {
    LeaveArriving();  // at once: a refused call must not crowd out the next one
    FinishLocked(admitted);
  }
}

absl::Status GemmCall::Admit() {
  if (absl::Status s = env_->registry->Enter(this); !s.ok()) return s;
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

void GemmCall::OnDraining(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kReceiving) FinishLocked(status);
}

void GemmCall::FinishLocked(const absl::Status& status) {
  state_ = State::kFinished;
  status_ = status;
  Finish(ToGrpcStatus(status));
}

void GemmCall::OnReadDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kReceiving) return;  // answered by a drain meanwhile
    state_ = State::kAccepted;
  }
  received_ = absl::Now();
  absl::Status status;
  if (!ok) {
    // No message: the client went away, or half-closed without sending one.
    status = context_->IsCancelled()
                 ? absl::CancelledError("the call ended before its request arrived")
                 : absl::InvalidArgumentError(absl::StrCat(
                       "the call carried no request message; expected one ",
                       RequestTypeName(method_)));
  } else {
    status = PrepareAndSubmit();
  }
  LeaveArriving();  // (already done when it reached Submit)
  if (!status.ok()) {
    request_.reset();  // not queued: the request and what it holds go now
    result_.reset();
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }
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

  if (r.kept_c == nullptr) r.operands.c_out = result_->data();
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
  return env_->executor->Submit(std::move(request_));
}

void GemmCall::JobDone(const GemmRequest& r, const absl::Status& status,
                       const JobResult& result) {
  if (status.ok()) {
    gemm::v1::Tensor c_head;
    for (int64_t dim : r.output_shape) c_head.add_shape(dim);
    c_head.set_dtype(DataTypeToProto(r.problem.c_type));
    gemm::v1::MatmulResponse rest;
    rest.set_kernel(std::string(r.kernel->name()));
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
      rest.mutable_c_ref()->set_handle(handle.ok() ? *handle : "");
    }
    response_bytes_ = EncodeMatmulResponse(c_head, std::move(result_), rest);
  }
  // The request itself (message, operands) goes when the executor lets go of it, right
  // after this returns.
  result_.reset();  // an error carries no result
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    state_ = State::kFinished;
    status_ = status;
    StartWriteAndFinish(&response_bytes_, grpc::WriteOptions(), grpc::Status::OK);
  } else {
    FinishLocked(status);
  }
}

absl::Status GemmCall::Outcome() const {
  absl::Status finished;
  {
    absl::MutexLock lock(&mu_);
    finished = status_;
  }
  if (!context_->IsCancelled()) return finished;
  // The client got no answer of ours: its deadline passed, it cancelled, or the
  // connection went (or gRPC reset the stream: its buffers were full).
  if (absl::Now() >= DeadlineOf(*context_)) {
    return absl::DeadlineExceededError(
        finished.ok() ? "the deadline passed before the response was sent"
                      : absl::StrCat("the deadline passed; the server's answer was: ",
                                     finished.message()));
  }
  return absl::CancelledError(finished.ok()
                                  ? "the client cancelled before the response was sent"
                                  : absl::StrCat("the client cancelled; the server's answer was: ",
                                                 finished.message()));
}

void GemmCall::OnDone() {
  const absl::Status outcome = Outcome();
  ServerMetrics* m = env_->metrics;
  m->RecordRequest(method_, label_, outcome.code(), tenant_);
  m->ObservePhase(method_, Phase::kTotal, absl::Now() - received_);
  if (outcome.ok()) {
    m->AddBytesReceived(input_bytes_);
    m->AddBytesSent(output_bytes_);
  } else {
    int64_t suppressed = 0;
    if (env_->failure_log->Allow(&suppressed)) {
      Log(LogLevel::kWarning, "request_failed",
          {{"method", RpcMethodName(method_)},
           {"code", absl::StatusCodeToString(outcome.code())},
           {"message", std::string(outcome.message())},
           {"peer", context_->peer()},
           {"tenant", tenant_},
           {"suppressed_before", absl::StrCat(suppressed)}});
    }
  }
  LeaveArriving();
  env_->tenant_budget->Release(tenant_, tenant_charged_);
  if (registered_) env_->registry->Leave(this);
  m->AddInflight(-1);
  delete this;
}

grpc::ServerGenericBidiReactor* UnimplementedCall(grpc::GenericCallbackServerContext* context) {
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Reactor(const std::string& method) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          absl::StrCat("unknown method ", ClientText(method))));
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
