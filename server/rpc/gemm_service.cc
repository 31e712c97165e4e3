#include "server/rpc/gemm_service.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "server/observability/log.h"
#include "server/observability/client_text.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/matmul_stream_call.h"
#include "server/rpc/raw_messages.h"
#include "server/rpc/refused_call.h"
#include "server/rpc/tensor_chunk_sequence.h"
#include "server/rpc/tensor_download_call.h"
#include "server/rpc/tensor_upload_call.h"

namespace gemmd {
namespace {

// ListTensors' page sizes.
constexpr uint32_t kDefaultListPage = 1000;
constexpr uint32_t kMaxListPage = 10000;

absl::Status NoStore() {
  return absl::FailedPreconditionError(
      "this server keeps no resident tensors (--tensor_store_bytes=0)");
}

int64_t UnixMillis(absl::Time t) { return t == absl::InfiniteFuture() ? 0 : absl::ToUnixMillis(t); }

// A page ends after a tensor; the next starts after it in the listing's order (created,
// then handle), so tensors stored or deleted meanwhile shift nothing.
std::string PageToken(const TensorListing& last) {
  return absl::StrCat(absl::ToUnixNanos(last.created), ".", last.handle);
}

absl::Status ParsePageToken(absl::string_view token, absl::Time* created, std::string* handle) {
  const std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(token, absl::MaxSplits('.', 1));
  int64_t nanos = 0;
  if (!absl::SimpleAtoi(parts.first, &nanos) || parts.second.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token '", ClientText(token),
                     "' is not one this server gave (pass next_page_token as it came)"));
  }
  *created = absl::FromUnixNanos(nanos);
  *handle = std::string(parts.second);
  return absl::OkStatus();
}

}  // namespace

GemmServiceImpl::GemmServiceImpl(ServiceSettings settings, std::vector<Device*> devices,
                                 const KernelCatalogue* catalogue, JobExecutor* executor,
                                 ServerMetrics* metrics, std::shared_ptr<HostMemory> memory,
                                 TensorStore* store, const TokenAuthenticator* tokens,
                                 RegionTable* regions)
    : settings_(std::move(settings)),
      devices_(std::move(devices)),
      catalogue_(catalogue),
      metrics_(metrics),
      memory_(std::move(memory)),
      store_(store),
      regions_(regions),
      auth_(tokens, metrics, &failure_log_),
      tenant_budget_(std::make_shared<TenantBudget>(settings_.tenant_max_inflight_bytes)),
      upload_watch_(settings_.upload_idle_timeout) {
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
  environment_.request.regions = regions_;
  environment_.preparers = &preparers_;
  environment_.prepare_inline_max_bytes = settings_.prepare_inline_max_bytes;
  environment_.stream_max_outstanding = settings_.stream_max_outstanding;
  environment_.executor = executor;
  environment_.metrics = metrics_;
  environment_.registry = &registry_;
  environment_.reporter = &reporter_;
  environment_.arriving = &arriving_;
  environment_.tenant_budget = tenant_budget_.get();
  tensor_environment_.store = store_;
  tensor_environment_.memory = memory_;
  tensor_environment_.tenant_budget = tenant_budget_;
  tensor_environment_.registry = &registry_;
  tensor_environment_.reporter = &reporter_;
  tensor_environment_.metrics = metrics_;
  tensor_environment_.upload_watch = &upload_watch_;
  tensor_environment_.copy_downloads = settings_.download_copies;
  tensor_environment_.regions = regions_;
}

GemmServiceImpl::~GemmServiceImpl() {
  if (int64_t suppressed = failure_log_.TakeSuppressed(); suppressed > 0) {
    Log(LogLevel::kWarning, "request_failed_suppressed", {{"count", absl::StrCat(suppressed)}});
  }
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GemmServiceImpl::MatmulStream(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kMatmulStream);
  if (!tenant.ok()) {
    return RefusedCall<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(
        tenant.status());
  }
  return new MatmulStreamCall(&environment_, context, *std::move(tenant));
}

grpc::ServerReadReactor<grpc::ByteBuffer>* GemmServiceImpl::PutTensor(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kPutTensor);
  if (!tenant.ok()) return RefusedCall<grpc::ServerReadReactor<grpc::ByteBuffer>>(tenant.status());
  return new TensorUploadCall(&tensor_environment_, context, response, *std::move(tenant));
}

void GemmServiceImpl::FinishUnary(grpc::ServerUnaryReactor* reactor,
                                  const grpc::CallbackServerContext& context, RpcMethod method,
                                  const std::string& tenant, const absl::Status& status,
                                  absl::Time accepted) {
  reporter_.Report(method, PrecisionLabel::None(), status, tenant, context.peer(),
                   absl::Now() - accepted);
  reactor->Finish(ToGrpcStatus(status));
}

void GemmServiceImpl::DescribeServer(gemm::v1::ServerInfo* info) const {
  info->set_version(settings_.version);
  info->set_backend(settings_.backend);
  for (const Device* device : devices_) {
    const DeviceDescription& d = device->description();
    gemm::v1::DeviceInfo* di = info->add_devices();
    di->set_index(d.index);
    di->set_kind(d.kind);
    di->set_name(d.name);
    di->set_compute_capability(d.compute_capability);
    di->set_memory_bytes(d.memory_bytes);
    di->set_healthy(device->healthy());
    di->set_threads(d.threads);
  }
  for (const KernelDescription& k : catalogue_->Kernels()) {
    if (k.input == KernelInput::kQuantized) {
      info->add_quantized_kernels(k.name);
      continue;
    }
    gemm::v1::KernelInfo* ki = info->add_kernels();
    ki->set_name(k.name);
    ki->set_precision(PrecisionToProto(k.precision));
    ki->set_min_compute_capability(k.min_compute_capability);
  }
  gemm::v1::Limits* limits = info->mutable_limits();
  limits->set_max_message_bytes(settings_.limits.max_message_bytes);
  limits->set_max_elements(settings_.limits.max_elements);
  limits->set_max_batch_size(settings_.max_batch_size);
  limits->set_max_queue_delay_us(absl::ToInt64Microseconds(settings_.max_queue_delay));
  limits->set_max_queue_size(settings_.max_queue_size);
  limits->set_max_inflight_bytes(settings_.max_inflight_bytes);
  limits->set_tensor_store_bytes(store_ != nullptr ? store_->cap_bytes() : 0);
  limits->set_tensor_store_max_tensors(store_ != nullptr ? store_->max_tensors() : 0);
  limits->set_max_tensor_chunk_bytes(kMaxTensorChunkBytes);
  limits->set_upload_idle_timeout_ms(absl::ToInt64Milliseconds(settings_.upload_idle_timeout));
  if (regions_ != nullptr && regions_->enabled()) {
    limits->set_shm_prefix(regions_->settings().prefix);
    limits->set_shm_max_bytes(regions_->settings().max_bytes);
    limits->set_shm_max_regions(regions_->settings().max_regions);
  }
  if (store_ != nullptr) info->set_instance(store_->instance());
}

bool GemmServiceImpl::AwaitDrained(absl::Time deadline) {
  bool logged = false;
  while (true) {
    if (!registry_.AwaitEmpty(deadline)) return false;
    const int64_t temporaries = store_ != nullptr ? store_->TemporaryCount() : 0;
    if (temporaries == 0) {
      if (registry_.size() == 0) return true;
      continue;  // an RPC that continued a call came in meanwhile
    }
    if (!logged) {
      Log(LogLevel::kInfo, "shutdown_awaiting_calls",
          {{"temporary_tensors", absl::StrCat(temporaries)}});
      logged = true;
    }
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

grpc::ServerUnaryReactor* GemmServiceImpl::GetServerInfo(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kGetServerInfo);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  absl::Status status = registry_.CheckOpen();
  gemm::v1::GetServerInfoRequest parsed;
  if (status.ok()) status = ParseSmallRequest(*request, &parsed);
  if (status.ok()) {
    gemm::v1::ServerInfo info;
    DescribeServer(&info);
    *response = SerializeToByteBuffer(info);
  }
  FinishUnary(reactor, *context, RpcMethod::kGetServerInfo, *tenant, status, accepted);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GemmServiceImpl::GetTensor(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kGetTensor);
  if (!tenant.ok()) {
    class Refused final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
     public:
      explicit Refused(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
      void OnDone() override { delete this; }
    };
    return new Refused(tenant.status());
  }
  return new TensorDownloadCall(&tensor_environment_, context, *request, *std::move(tenant));
}

grpc::ServerUnaryReactor* GemmServiceImpl::DeleteTensor(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kDeleteTensor);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  absl::Status status =
      registry_.CheckOpen(registry_.draining() && ContinuesACall(*context, store_, *tenant));
  gemm::v1::TensorHandle handle;
  if (status.ok()) status = ParseSmallRequest(*request, &handle);
  if (status.ok())
    status = store_ != nullptr ? store_->Delete(handle.handle(), *tenant) : NoStore();
  if (status.ok()) *response = SerializeToByteBuffer(gemm::v1::DeleteTensorResponse());
  FinishUnary(reactor, *context, RpcMethod::kDeleteTensor, *tenant, status, accepted);
  return reactor;
}

absl::Status GemmServiceImpl::ListTensorsOf(const std::string& tenant,
                                            const grpc::ByteBuffer& request, absl::Time now,
                                            grpc::ByteBuffer* response) {
  if (absl::Status s = registry_.CheckOpen(); !s.ok()) return s;
  gemm::v1::ListTensorsRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  if (parsed.page_size() > kMaxListPage) {
    return absl::InvalidArgumentError(absl::StrCat("page_size is ", parsed.page_size(),
                                                   "; at most ", kMaxListPage,
                                                   " (0 = ", kDefaultListPage, ")"));
  }
  const uint32_t page_size = parsed.page_size() > 0 ? parsed.page_size() : kDefaultListPage;
  absl::Time after_created = absl::InfinitePast();
  std::string after_handle;
  if (!parsed.page_token().empty()) {
    if (absl::Status s = ParsePageToken(parsed.page_token(), &after_created, &after_handle);
        !s.ok()) {
      return s;
    }
  }
  gemm::v1::ListTensorsResponse reply;
  if (store_ != nullptr) {
    const std::vector<TensorListing> all = store_->List(tenant);
    // The listing is sorted by (created, handle): the page starts after the token's.
    auto it = std::upper_bound(
        all.begin(), all.end(), std::tie(after_created, after_handle),
        [](const std::tuple<const absl::Time&, const std::string&>& key, const TensorListing& t) {
          return key < std::tie(t.created, t.handle);
        });
    for (; it != all.end() && reply.tensors_size() < static_cast<int>(page_size); ++it) {
      const TensorListing& t = *it;
      gemm::v1::TensorInfo* info = reply.add_tensors();
      info->mutable_handle()->set_handle(t.handle);
      const gemm::v1::TensorHeader header = HeaderOf(t.spec, t.expires, t.label, now);
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
    if (it != all.end()) reply.set_next_page_token(PageToken(*std::prev(it)));
    reply.set_store_bytes(store_->used_bytes());
    reply.set_store_cap_bytes(store_->cap_bytes());
    reply.set_store_tensors(store_->tensor_count());
    reply.set_store_max_tensors(store_->max_tensors());
  }
  *response = SerializeToByteBuffer(reply);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* GemmServiceImpl::ListTensors(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  const absl::Time accepted = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> tenant = auth_.TenantOf(*context, RpcMethod::kListTensors);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  const absl::Status status = ListTensorsOf(*tenant, *request, accepted, response);
  FinishUnary(reactor, *context, RpcMethod::kListTensors, *tenant, status, accepted);
  return reactor;
}

}  // namespace gemmd
