#include "server/gemm_service.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "server/grpc_status.h"
#include "server/log.h"
#include "server/matmul_message_pool.h"

namespace gemmd {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

}  // namespace

GemmServiceImpl::GemmServiceImpl(ServiceSettings settings, std::vector<Device*> devices,
                                 JobExecutor* executor, ServerMetrics* metrics)
    : settings_(std::move(settings)),
      devices_(std::move(devices)),
      executor_(executor),
      metrics_(metrics) {}

void GemmServiceImpl::AddInflight(int delta) {
  metrics_->AddInflight(delta);
  absl::MutexLock lock(&inflight_mu_);
  inflight_ += delta;
}

bool GemmServiceImpl::AwaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&inflight_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(inflight_mu_) { return inflight_ == 0; };
  return inflight_mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

void GemmServiceImpl::Answer(grpc::CallbackServerContext* context,
                             grpc::ServerUnaryReactor* reactor, RpcMethod method,
                             std::optional<Precision> precision, const absl::Status& status,
                             absl::Time accepted) {
  metrics_->RecordRequest(method, precision, status.code());
  metrics_->ObservePhase(method, Phase::kTotal, absl::Now() - accepted);
  if (!status.ok()) {
    Log(LogLevel::kWarning, "request_failed",
        {{"method", RpcMethodName(method)},
         {"code", absl::StatusCodeToString(status.code())},
         {"message", std::string(status.message())},
         {"peer", context->peer()}});
  }
  reactor->Finish(ToGrpcStatus(status));
  AddInflight(-1);
}

grpc::ServerUnaryReactor* GemmServiceImpl::Matmul(grpc::CallbackServerContext* context,
                                                  const gemm::v1::MatmulRequest* request,
                                                  gemm::v1::MatmulResponse* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  AddInflight(1);
  auto fail = [&](std::optional<Precision> precision, const absl::Status& status) {
    Answer(context, reactor, RpcMethod::kMatmul, precision, status, accepted);
    return reactor;
  };
  if (draining_.load())
    return fail(std::nullopt, absl::UnavailableError("server is shutting down"));

  absl::StatusOr<ValidatedMatmul> validated = ValidateMatmul(*request, settings_.limits);
  if (!validated.ok()) return fail(std::nullopt, validated.status());
  const Precision precision = validated->problem.precision;
  // Every device of a server is of one kind, so the first one answers for all. The
  // device picks the kernel again for the whole batch; this catches, before queueing,
  // a request no kernel here can run (or an unknown forced kernel).
  absl::StatusOr<std::string> kernel =
      devices_.front()->SelectKernel(validated->problem, validated->kernel);
  if (!kernel.ok()) return fail(precision, kernel.status());

  // The result is computed straight into the response's bytes: no copy on the way out.
  gemm::v1::Tensor* c = response->mutable_c();
  for (int64_t dim : validated->output_shape) c->add_shape(dim);
  c->set_dtype(DataTypeToProto(validated->problem.c_type));
  std::string* c_data = c->mutable_data();
  MatmulMessagePool::PrepareResultBuffer(context->GetRpcAllocatorState(), c_data,
                                         static_cast<size_t>(validated->output_bytes));

  auto job = std::make_unique<Job>();
  job->problem = validated->problem;
  job->operands = validated->operands;
  job->operands.c_out = c_data->data();
  job->forced_kernel = validated->kernel;
  job->accepted = accepted;
  job->deadline = DeadlineOf(*context);
  job->is_cancelled = [context] { return context->IsCancelled(); };
  const int64_t bytes_in = validated->input_bytes;
  const int64_t bytes_out = validated->output_bytes;
  job->done = [this, context, reactor, response, precision, accepted, bytes_in, bytes_out](
                  const absl::Status& status, const JobResult& result) {
    if (status.ok()) {
      response->set_kernel(result.kernel);
      response->set_device(result.device);
      response->set_precision(PrecisionToProto(precision));
      gemm::v1::Timing* timing = response->mutable_timing();
      timing->set_queue_us(Micros(result.queue));
      timing->set_copy_in_us(Micros(result.copy_in));
      timing->set_compute_us(Micros(result.compute));
      timing->set_copy_out_us(Micros(result.copy_out));
      timing->set_total_us(Micros(absl::Now() - accepted));
      timing->set_batch_size(result.batch_size);
      metrics_->ObservePhase(RpcMethod::kMatmul, Phase::kQueue, result.queue);
      metrics_->ObservePhase(RpcMethod::kMatmul, Phase::kCopyIn, result.copy_in);
      metrics_->ObservePhase(RpcMethod::kMatmul, Phase::kCompute, result.compute);
      metrics_->ObservePhase(RpcMethod::kMatmul, Phase::kCopyOut, result.copy_out);
      metrics_->AddBytesReceived(bytes_in);
      metrics_->AddBytesSent(bytes_out);
    } else {
      response->Clear();  // an error carries no partial result
    }
    Answer(context, reactor, RpcMethod::kMatmul, precision, status, accepted);
  };

  absl::Status submitted = executor_->Submit(std::move(job));
  if (!submitted.ok()) {
    response->Clear();
    return fail(precision, submitted);
  }
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* context, const gemm::v1::GetServerInfoRequest* /*request*/,
    gemm::v1::ServerInfo* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  AddInflight(1);
  response->set_version(settings_.version);
  response->set_backend(settings_.backend);
  for (const Device* device : devices_) {
    const DeviceDescription& d = device->description();
    gemm::v1::DeviceInfo* info = response->add_devices();
    info->set_index(d.index);
    info->set_kind(d.kind);
    info->set_name(d.name);
    info->set_compute_capability(d.compute_capability);
    info->set_memory_bytes(d.memory_bytes);
    info->set_healthy(device->healthy());
    info->set_threads(d.threads);
  }
  for (const KernelDescription& k : devices_.front()->Kernels()) {
    gemm::v1::KernelInfo* info = response->add_kernels();
    info->set_name(k.name);
    info->set_precision(PrecisionToProto(k.precision));
    info->set_min_compute_capability(k.min_compute_capability);
  }
  gemm::v1::Limits* limits = response->mutable_limits();
  limits->set_max_message_bytes(settings_.limits.max_message_bytes);
  limits->set_max_elements(settings_.limits.max_elements);
  limits->set_max_batch_size(settings_.max_batch_size);
  limits->set_max_queue_delay_us(absl::ToInt64Microseconds(settings_.max_queue_delay));
  limits->set_max_queue_size(settings_.max_queue_size);
  limits->set_max_inflight_bytes(settings_.max_inflight_bytes);
  Answer(context, reactor, RpcMethod::kGetServerInfo, std::nullopt, absl::OkStatus(), accepted);
  return reactor;
}

}  // namespace gemmd
