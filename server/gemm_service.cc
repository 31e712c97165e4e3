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
#include "server/quantized_validation.h"

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
                             PrecisionLabel precision, const absl::Status& status,
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

GemmServiceImpl::GemmCall GemmServiceImpl::BeginGemm(grpc::CallbackServerContext* context,
                                                     RpcMethod method) {
  GemmCall call;
  call.context = context;
  call.reactor = context->DefaultReactor();
  call.method = method;
  call.accepted = absl::Now();
  AddInflight(1);
  return call;
}

grpc::ServerUnaryReactor* GemmServiceImpl::Reject(const GemmCall& call,
                                                  const absl::Status& status) {
  Answer(call.context, call.reactor, call.method, call.label, status, call.accepted);
  return call.reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::SubmitGemm(const GemmCall& call,
                                                      gemm::v1::MatmulResponse* response) {
  auto fail = [&](const absl::Status& status) {
    response->Clear();
    return Reject(call, status);
  };
  // Every device of a server is of one kind, so the first one answers for all. The
  // device picks the kernel again for the whole batch; this catches, before queueing,
  // a request no kernel here can run (or an unknown forced kernel). (Packed quantized
  // operands were already accepted by the device's RunsQuantized.)
  if (call.quantized == nullptr) {
    absl::StatusOr<std::string> kernel =
        devices_.front()->SelectKernel(call.problem, call.forced_kernel);
    if (!kernel.ok()) return fail(kernel.status());
  }

  // The result is computed straight into the response's bytes: no copy on the way out.
  gemm::v1::Tensor* c = response->mutable_c();
  for (int64_t dim : call.output_shape) c->add_shape(dim);
  c->set_dtype(DataTypeToProto(call.problem.c_type));
  std::string* c_data = c->mutable_data();
  PrepareResultBuffer(call.context->GetRpcAllocatorState(), c_data,
                      static_cast<size_t>(call.output_bytes));

  auto job = std::make_unique<Job>();
  job->problem = call.problem;
  job->operands = call.operands;
  job->operands.c_out = c_data->data();
  job->quantized = call.quantized;
  job->forced_kernel = call.forced_kernel;
  job->accepted = call.accepted + call.prepare;  // queue time starts after preparing
  job->deadline = DeadlineOf(*call.context);
  grpc::CallbackServerContext* context = call.context;
  job->is_cancelled = [context] { return context->IsCancelled(); };
  job->done = [this, call, response](const absl::Status& status, const JobResult& result) {
    if (status.ok()) {
      response->set_kernel(result.kernel);
      response->set_device(result.device);
      response->set_precision(PrecisionToProto(call.problem.precision));
      gemm::v1::Timing* timing = response->mutable_timing();
      timing->set_queue_us(Micros(result.queue));
      timing->set_copy_in_us(Micros(call.prepare + result.copy_in));
      timing->set_compute_us(Micros(result.compute));
      timing->set_copy_out_us(Micros(result.copy_out));
      timing->set_total_us(Micros(absl::Now() - call.accepted));
      timing->set_batch_size(result.batch_size);
      metrics_->ObservePhase(call.method, Phase::kQueue, result.queue);
      metrics_->ObservePhase(call.method, Phase::kCopyIn, call.prepare + result.copy_in);
      metrics_->ObservePhase(call.method, Phase::kCompute, result.compute);
      metrics_->ObservePhase(call.method, Phase::kCopyOut, result.copy_out);
      metrics_->AddBytesReceived(call.input_bytes);
      metrics_->AddBytesSent(call.output_bytes);
    } else {
      response->Clear();  // an error carries no partial result
    }
    Answer(call.context, call.reactor, call.method, call.label, status, call.accepted);
  };

  absl::Status submitted = executor_->Submit(std::move(job));
  if (!submitted.ok()) return fail(submitted);
  return call.reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::Matmul(grpc::CallbackServerContext* context,
                                                  const gemm::v1::MatmulRequest* request,
                                                  gemm::v1::MatmulResponse* response) {
  GemmCall call = BeginGemm(context, RpcMethod::kMatmul);
  auto fail = [&](const absl::Status& status) { return Reject(call, status); };
  if (draining_.load()) return fail(absl::UnavailableError("server is shutting down"));

  absl::StatusOr<ValidatedMatmul> validated = ValidateMatmul(*request, settings_.limits);
  if (!validated.ok()) return fail(validated.status());
  call.label = PrecisionLabel::Of(validated->problem.precision);
  call.problem = validated->problem;
  call.operands = validated->operands;  // point into the request, which outlives the job
  call.forced_kernel = validated->kernel;
  call.output_shape = validated->output_shape;
  call.input_bytes = validated->input_bytes;
  call.output_bytes = validated->output_bytes;
  return SubmitGemm(call, response);
}

grpc::ServerUnaryReactor* GemmServiceImpl::QuantizedMatmul(
    grpc::CallbackServerContext* context, const gemm::v1::QuantizedMatmulRequest* request,
    gemm::v1::MatmulResponse* response) {
  GemmCall call = BeginGemm(context, RpcMethod::kQuantizedMatmul);
  auto fail = [&](const absl::Status& status) { return Reject(call, status); };
  if (draining_.load()) return fail(absl::UnavailableError("server is shutting down"));

  absl::StatusOr<ValidatedQuantized> v = ValidateQuantizedMatmul(*request, settings_.limits);
  if (!v.ok()) return fail(v.status());
  call.label = PrecisionLabel::Of(v->b_format);
  // The FP32 equivalent, C = A * B^T with B stored [N, K]: what placement (FLOPs) and the
  // host path use.
  call.problem.m = v->m;
  call.problem.n = v->n;
  call.problem.k = v->k;
  call.problem.transpose_b = true;
  call.problem.precision = Precision::kFp32;
  call.forced_kernel = v->kernel;
  call.output_shape = {v->m, v->n};
  call.input_bytes = v->input_bytes;
  call.output_bytes = v->output_bytes;

  // A GPU with quantized kernels takes the packed bytes as they are (unless the request
  // forces a dense kernel). Checking the scale bytes is the only host work left; it
  // counts as copy-in, like dequantizing.
  QuantizedOperands packed = PackedOperands(*request, *v);
  absl::StatusOr<std::string> quantized_kernel =
      devices_.front()->SelectQuantizedKernel(packed, v->kernel);
  if (!quantized_kernel.ok()) return fail(quantized_kernel.status());
  if (!quantized_kernel->empty()) {
    call.forced_kernel = *quantized_kernel;
    const absl::Time check_start = absl::Now();
    if (absl::Status s = CheckPackedScales(*request, *v); !s.ok()) return fail(s);
    call.prepare = absl::Now() - check_start;
    call.quantized = std::make_shared<const QuantizedOperands>(std::move(packed));
    return SubmitGemm(call, response);
  }

  // Otherwise dequantize to FP32 (validated sizes only) and run the FP32 GEMM, refusing
  // first when the executor would refuse the FP32 job (the packed path above allocates
  // nothing but the result before Submit decides, which counts its packed bytes).
  if (absl::Status s = executor_->CheckAdmission(call.problem); !s.ok()) return fail(s);
  // Allocating and dequantizing is host work on the operands: it counts as copy-in.
  // (No zero-fill: dequantizing writes every element.)
  const absl::Time prepare_start = absl::Now();
  std::shared_ptr<float[]> operands(new float[static_cast<size_t>((v->m + v->n) * v->k)]);
  float* a = operands.get();
  float* b = a + v->m * v->k;
  if (absl::Status s = DequantizeOperands(*request, *v, a, b); !s.ok()) return fail(s);
  call.prepare = absl::Now() - prepare_start;
  call.operands = {a, b, nullptr, nullptr};
  call.keep_alive = std::move(operands);
  return SubmitGemm(call, response);
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
  for (const std::string& name : devices_.front()->QuantizedKernels()) {
    response->add_quantized_kernels(name);
  }
  gemm::v1::Limits* limits = response->mutable_limits();
  limits->set_max_message_bytes(settings_.limits.max_message_bytes);
  limits->set_max_elements(settings_.limits.max_elements);
  limits->set_max_batch_size(settings_.max_batch_size);
  limits->set_max_queue_delay_us(absl::ToInt64Microseconds(settings_.max_queue_delay));
  limits->set_max_queue_size(settings_.max_queue_size);
  limits->set_max_inflight_bytes(settings_.max_inflight_bytes);
  Answer(context, reactor, RpcMethod::kGetServerInfo, PrecisionLabel::None(), absl::OkStatus(),
         accepted);
  return reactor;
}

}  // namespace gemmd
