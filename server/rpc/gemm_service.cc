#include "server/rpc/gemm_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "server/observability/log.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/tensor_download_call.h"
#include "server/rpc/tensor_chunk_sequence.h"
#include "server/rpc/tensor_upload_call.h"

namespace gemmd {

GemmServiceImpl::GemmServiceImpl(ServiceSettings settings, std::vector<Device*> devices,
                                 const KernelCatalogue* catalogue, JobExecutor* executor,
                                 ServerMetrics* metrics, std::shared_ptr<HostMemory> memory,
                                 TensorStore* store, const TokenAuthenticator* tokens)
    : settings_(std::move(settings)),
      devices_(std::move(devices)),
      catalogue_(catalogue),
      metrics_(metrics),
      memory_(std::move(memory)),
      store_(store),
      auth_(tokens, metrics, &failure_log_),
      tenant_budget_(settings_.tenant_max_inflight_bytes) {
  environment_.request.limits = settings_.limits;
  environment_.request.catalogue = catalogue_;
  environment_.request.memory = memory_.get();
  environment_.request.copier = &copier_;
  environment_.request.device_gathers_pieces = !devices_.empty();
  for (const Device* device : devices_) {
    environment_.request.device_gathers_pieces &= device->gathers_pieces();
    environment_.request.resident_in_host_memory &= device->resident_in_host_memory();
  }
  environment_.request.store = store_;
  environment_.executor = executor;
  environment_.metrics = metrics_;
  environment_.registry = &registry_;
  environment_.failure_log = &failure_log_;
  environment_.arriving = &arriving_;
  environment_.tenant_budget = &tenant_budget_;
}

GemmServiceImpl::~GemmServiceImpl() {
  if (int64_t suppressed = failure_log_.TakeSuppressed(); suppressed > 0) {
    Log(LogLevel::kWarning, "request_failed_suppressed", {{"count", absl::StrCat(suppressed)}});
  }
}

grpc::ServerGenericBidiReactor* GemmServiceImpl::GenericCalls::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  static const std::string kMatmul = "/gemm.v1.GemmService/Matmul";
  static const std::string kQuantizedMatmul = "/gemm.v1.GemmService/QuantizedMatmul";
  static const std::string kPutTensor = "/gemm.v1.GemmService/PutTensor";
  const std::string& name = context->method();
  const RpcMethod method = name == kMatmul            ? RpcMethod::kMatmul
                           : name == kQuantizedMatmul ? RpcMethod::kQuantizedMatmul
                           : name == kPutTensor       ? RpcMethod::kPutTensor
                                                      : RpcMethod::kGetServerInfo;
  if (method == RpcMethod::kGetServerInfo) return UnimplementedCall(context);
  absl::StatusOr<std::string> tenant = service_->auth_.TenantOf(*context, method);
  if (!tenant.ok()) return RefusedCall(tenant.status());
  if (method == RpcMethod::kPutTensor) {
    return new TensorUploadCall(service_->store_, service_->metrics_, context, *std::move(tenant));
  }
  return new GemmCall(&service_->environment_, context, method, *std::move(tenant));
}

grpc::ServerUnaryReactor* GemmServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* context, const gemm::v1::GetServerInfoRequest* /*request*/,
    gemm::v1::ServerInfo* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kGetServerInfo);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
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
  for (const KernelDescription& k : catalogue_->Kernels()) {
    if (k.input == KernelInput::kQuantized) {
      response->add_quantized_kernels(k.name);
      continue;
    }
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
  limits->set_tensor_store_bytes(store_ != nullptr ? store_->cap_bytes() : 0);
  limits->set_max_tensor_chunk_bytes(kMaxTensorChunkBytes);
  if (store_ != nullptr) response->set_instance(store_->instance());
  metrics_->RecordRequest(RpcMethod::kGetServerInfo, PrecisionLabel::None(), absl::StatusCode::kOk,
                          *tenant);
  metrics_->ObservePhase(RpcMethod::kGetServerInfo, Phase::kTotal, absl::Now() - accepted);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

absl::Status NoStore() {
  return absl::FailedPreconditionError(
      "this server keeps no resident tensors (--tensor_store_bytes=0)");
}

int64_t UnixMillis(absl::Time t) {
  return t == absl::InfiniteFuture() ? 0 : absl::ToUnixMillis(t);
}

}  // namespace

grpc::ServerWriteReactor<gemm::v1::TensorChunk>* GemmServiceImpl::GetTensor(
    grpc::CallbackServerContext* context, const gemm::v1::TensorHandle* request) {
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kGetTensor);
  if (!tenant.ok()) return new TensorDownloadCall(nullptr, tenant.status(), nullptr);
  absl::StatusOr<TensorPin> pin = store_ != nullptr ? store_->Acquire(request->handle(), *tenant)
                                                    : absl::StatusOr<TensorPin>(NoStore());
  if (!pin.ok()) return new TensorDownloadCall(nullptr, pin.status(), metrics_, *tenant);
  return new TensorDownloadCall(*std::move(pin), absl::OkStatus(), metrics_, *tenant);
}

grpc::ServerUnaryReactor* GemmServiceImpl::DeleteTensor(
    grpc::CallbackServerContext* context, const gemm::v1::TensorHandle* request,
    gemm::v1::DeleteTensorResponse* /*response*/) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kDeleteTensor);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  const absl::Status status =
      store_ != nullptr ? store_->Delete(request->handle(), *tenant) : NoStore();
  metrics_->RecordRequest(RpcMethod::kDeleteTensor, PrecisionLabel::None(), status.code(),
                          *tenant);
  metrics_->ObservePhase(RpcMethod::kDeleteTensor, Phase::kTotal, absl::Now() - accepted);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* GemmServiceImpl::ListTensors(
    grpc::CallbackServerContext* context, const gemm::v1::ListTensorsRequest* /*request*/,
    gemm::v1::ListTensorsResponse* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kListTensors);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  if (store_ != nullptr) {
    for (const TensorListing& t : store_->List(*tenant)) {
      gemm::v1::TensorInfo* info = response->add_tensors();
      info->mutable_handle()->set_handle(t.handle);
      const gemm::v1::TensorHeader header = HeaderOf(t.spec, t.expires, t.label, accepted);
      *info->mutable_shape() = header.shape();
      info->set_dtype(header.dtype());
      info->set_format(header.format());
      info->set_tensor_scale(header.tensor_scale());
      info->set_bytes(t.bytes);
      info->set_device(t.device);
      info->set_created_unix_ms(UnixMillis(t.created));
      info->set_expires_unix_ms(UnixMillis(t.expires));
      info->set_label(t.label);
      info->set_complete(t.complete);
    }
    response->set_store_bytes(store_->used_bytes());
    response->set_store_cap_bytes(store_->cap_bytes());
  }
  metrics_->RecordRequest(RpcMethod::kListTensors, PrecisionLabel::None(), absl::StatusCode::kOk,
                          *tenant);
  metrics_->ObservePhase(RpcMethod::kListTensors, Phase::kTotal, absl::Now() - accepted);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace gemmd
