#include "server/rpc/gemm_service.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/proto_types.h"
#include "server/observability/client_text.h"
#include "server/observability/log.h"
#include "server/rpc/call_continuation.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/matmul_stream_call.h"
#include "server/rpc/raw_messages.h"
#include "server/rpc/refused_call.h"
#include "server/rpc/tensor_chunk_sequence.h"
#include "server/rpc/tensor_download_call.h"
#include "server/rpc/tensor_upload_call.h"
#include "server/rpc/unary_call.h"

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
  server_info_.request = [this](grpc::ServerContext* context, grpc::ByteBuffer* request,
                                grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* responder,
                                grpc::ServerCompletionQueue* queue, void* tag) {
    listed_gemm_.RequestGetServerInfo(context, request, responder, queue, queue, tag);
  };
  server_info_.serve = ServingOf(RpcMethod::kGetServerInfo, &GemmServiceImpl::GetServerInfo);
  auto unary = [this](RpcMethod method, const char* request_type, ServeUnary serve) {
    return MethodRoute{Served::kUnary, method, request_type, ServingOf(method, serve)};
  };
  routes_ = {
      {"/gemm.v1.GemmService/Matmul", {Served::kGemm, RpcMethod::kMatmul}},
      {"/gemm.v1.GemmService/QuantizedMatmul", {Served::kGemm, RpcMethod::kQuantizedMatmul}},
      {"/gemm.v1.GemmService/MatmulStream", {Served::kStream, RpcMethod::kMatmulStream}},
      {"/gemm.v1.GemmService/PutTensor", {Served::kPut, RpcMethod::kPutTensor}},
      {"/gemm.v1.GemmService/GetTensor", {Served::kGet, RpcMethod::kGetTensor}},
      {"/gemm.v1.GemmService/DeleteTensor",
       unary(RpcMethod::kDeleteTensor, "gemm.v1.TensorHandle", &GemmServiceImpl::DeleteTensor)},
      {"/gemm.v1.GemmService/ListTensors",
       unary(RpcMethod::kListTensors, "gemm.v1.ListTensorsRequest", &GemmServiceImpl::ListTensors)},
      {"/gemm.v1.GemmService/RegisterRegion",
       unary(RpcMethod::kRegisterRegion, "gemm.v1.RegisterRegionRequest",
             &GemmServiceImpl::RegisterRegion)},
      {"/gemm.v1.GemmService/UnregisterRegion",
       unary(RpcMethod::kUnregisterRegion, "gemm.v1.UnregisterRegionRequest",
             &GemmServiceImpl::UnregisterRegion)},
      {"/gemm.v1.GemmService/ListRegions",
       unary(RpcMethod::kListRegions, "gemm.v1.ListRegionsRequest", &GemmServiceImpl::ListRegions)},
  };
  health_check_.request = [this](grpc::ServerContext* context, grpc::ByteBuffer* request,
                                 grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* responder,
                                 grpc::ServerCompletionQueue* queue, void* tag) {
    listed_health_.RequestCheck(context, request, responder, queue, queue, tag);
  };
  health_check_.serve = [this](const grpc::ServerContextBase&, const grpc::ByteBuffer& request,
                               grpc::ByteBuffer* response) {
    return ServeHealthCheck(health_, request, response);
  };
}

GemmServiceImpl::~GemmServiceImpl() {
  if (int64_t suppressed = failure_log_.TakeSuppressed(); suppressed > 0) {
    Log(LogLevel::kWarning, "request_failed_suppressed", {{"count", absl::StrCat(suppressed)}});
  }
}

void GemmServiceImpl::Route(QueuedCall* call) {
  if (call->context().method() == kHealthWatchMethod) {  // no token, not counted
    new HealthWatchCall(call, &health_);
    return;
  }
  const auto it = routes_.find(call->context().method());
  if (it == routes_.end()) {
    new RefusedCall(call, absl::UnimplementedError(absl::StrCat(
                              "unknown method ", ClientText(call->context().method()))));
    return;
  }
  const MethodRoute& m = it->second;
  switch (m.served) {
    case Served::kGemm:
      new GemmCall(&gemm_setup_, call, m.method);
      return;
    case Served::kUnary:
      new UnaryCall(call, m.request_type, &m.serve);
      return;
    default:
      break;
  }
  absl::StatusOr<std::string> tenant = auth_.TenantOf(call->context(), m.method);
  if (!tenant.ok()) {
    new RefusedCall(call, tenant.status());  // counted and logged by TenantOf
    return;
  }
  switch (m.served) {
    case Served::kStream:
      new MatmulStreamCall(&environment_, call, *std::move(tenant));
      return;
    case Served::kPut:
      new TensorUploadCall(&tensor_environment_, call, *std::move(tenant));
      return;
    default:  // kGet
      new TensorDownloadCall(&tensor_environment_, call, *std::move(tenant));
      return;
  }
}

UnaryCall::Serve GemmServiceImpl::ServingOf(RpcMethod method, ServeUnary serve) {
  return [this, method, serve](const grpc::ServerContextBase& context,
                               const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
    const absl::Time accepted = absl::Now();
    absl::StatusOr<std::string> tenant = auth_.TenantOf(context, method);
    if (!tenant.ok()) return tenant.status();  // counted and logged by TenantOf
    const absl::Status status = (this->*serve)(context, *tenant, request, response);
    reporter_.Report(method, PrecisionLabel::None(), status, *tenant, context.peer(),
                     absl::Now() - accepted);
    return status;
  };
}

void GemmServiceImpl::AddTo(grpc::ServerBuilder* builder, int threads) {
  builder->RegisterService(&listed_gemm_);
  builder->RegisterService(&listed_health_);
  call_queues_.AddTo(builder, threads);
}

void GemmServiceImpl::Start() {
  // A few of each waiting per queue: each arrival posts the next.
  constexpr int kWaitingPerQueue = 4;
  call_queues_.Start([this](grpc::ServerCompletionQueue* queue) {
    for (int i = 0; i < kWaitingPerQueue; ++i) {
      RegisteredUnaryCall::Await(&server_info_, queue);
      RegisteredUnaryCall::Await(&health_check_, queue);
    }
  });
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

absl::Status GemmServiceImpl::GetServerInfo(const grpc::ServerContextBase& context,
                                            const std::string& tenant,
                                            const grpc::ByteBuffer& request,
                                            grpc::ByteBuffer* response) {
  if (absl::Status s = registry_.CheckOpen(); !s.ok()) return s;
  gemm::v1::GetServerInfoRequest parsed;
  if (absl::Status s = ParseSmallRequest(request, &parsed); !s.ok()) return s;
  gemm::v1::ServerInfo info;
  DescribeServer(&info);
  *response = SerializeToByteBuffer(info);
  return absl::OkStatus();
}

absl::Status GemmServiceImpl::DeleteTensor(const grpc::ServerContextBase& context,
                                           const std::string& tenant,
                                           const grpc::ByteBuffer& request,
                                           grpc::ByteBuffer* response) {
  if (absl::Status s =
          registry_.CheckOpen(registry_.draining() && ContinuesACall(context, store_, tenant));
      !s.ok()) {
    return s;
  }
  gemm::v1::TensorHandle handle;
  if (absl::Status s = ParseSmallRequest(request, &handle); !s.ok()) return s;
  if (store_ == nullptr) return NoStore();
  if (absl::Status s = store_->Delete(handle.handle(), tenant); !s.ok()) return s;
  *response = SerializeToByteBuffer(gemm::v1::DeleteTensorResponse());
  return absl::OkStatus();
}

absl::Status GemmServiceImpl::ListTensors(const grpc::ServerContextBase& context,
                                          const std::string& tenant,
                                          const grpc::ByteBuffer& request,
                                          grpc::ByteBuffer* response) {
  const absl::Time now = absl::Now();
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

}  // namespace gemmd
