#include "server/observability/metrics.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

const char* PhaseName(int phase) {
  static constexpr const char* kNames[kNumPhases] = {"queue", "copy_in", "compute", "copy_out",
                                                     "total"};
  return kNames[phase];
}

// 50 µs to 60 s: small GEMMs on a GPU through to large ones on a CPU.
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  return {50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0,    10.0, 30.0,  60.0};
}

}  // namespace

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kMatmul:
      return "Matmul";
    case RpcMethod::kQuantizedMatmul:
      return "QuantizedMatmul";
    case RpcMethod::kGetServerInfo:
      return "GetServerInfo";
    case RpcMethod::kPutTensor:
      return "PutTensor";
    case RpcMethod::kGetTensor:
      return "GetTensor";
    case RpcMethod::kDeleteTensor:
      return "DeleteTensor";
    case RpcMethod::kListTensors:
      return "ListTensors";
    case RpcMethod::kRegisterRegion:
      return "RegisterRegion";
    case RpcMethod::kUnregisterRegion:
      return "UnregisterRegion";
    case RpcMethod::kListRegions:
      return "ListRegions";
    case RpcMethod::kMatmulStream:
      return "MatmulStream";
  }
  return "unknown";
}

namespace {

std::vector<int> Positions(int n) {
  std::vector<int> labels;
  for (int i = 0; i < n; ++i) labels.push_back(i);
  return labels;
}

}  // namespace

const char* PrecisionLabel::name() const {
  if (index_ < kNumPrecisions) return PrecisionName(static_cast<Precision>(index_));
  if (index_ < kNumPrecisions + kNumQuantFormats) {
    return QuantFormatName(static_cast<QuantFormat>(index_ - kNumPrecisions));
  }
  return "NONE";
}

bool PrecisionLabel::AppliesTo(RpcMethod method) const {
  if (index_ == None().index()) return true;
  switch (method) {
    case RpcMethod::kMatmul:
      return index_ < kNumPrecisions;
    case RpcMethod::kQuantizedMatmul:
      return index_ >= kNumPrecisions;
    default:
      return false;
  }
}

ServerMetrics::ServerMetrics(int num_devices) : ServerMetrics(Positions(num_devices)) {}

ServerMetrics::ServerMetrics(const std::vector<int>& device_labels)
    : registry_(std::make_shared<prometheus::Registry>()) {
  const int num_devices = static_cast<int>(device_labels.size());
  auto& requests = prometheus::BuildCounter()
                       .Name("gemm_requests_total")
                       .Help("RPCs answered, by method, precision and status code")
                       .Register(*registry_);
  requests_family_ = &requests;
  for (int m = 0; m < kNumRpcMethods; ++m) {
    const auto method = static_cast<RpcMethod>(m);
    for (int p = 0; p < PrecisionLabel::kCount; ++p) {
      const PrecisionLabel precision = PrecisionLabel::FromIndex(p);
      if (!precision.AppliesTo(method)) continue;
      for (int c = 0; c < kNumCodes; ++c) {
        requests_[m][p][c] = &requests.Add(
            {{"method", RpcMethodName(method)},
             {"precision", precision.name()},
             {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
      }
    }
  }
  auto& durations = prometheus::BuildHistogram()
                        .Name("gemm_request_duration_seconds")
                        .Help("Server-side time of answered requests, by phase")
                        .Register(*registry_);
  for (int m = 0; m < kNumRpcMethods; ++m) {
    for (int p = 0; p < kNumPhases; ++p) {
      // Only the GEMM methods have device phases; others export their total alone.
      if (!IsGemmMethod(static_cast<RpcMethod>(m)) && p != static_cast<int>(Phase::kTotal)) {
        continue;
      }
      durations_[m][p] = &durations.Add(
          {{"method", RpcMethodName(static_cast<RpcMethod>(m))}, {"phase", PhaseName(p)}},
          DurationBuckets());
    }
  }
  batch_size_ =
      &prometheus::BuildHistogram()
           .Name("gemm_batch_size")
           .Help("Requests that shared one launch")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512});
  region_bytes_ = &prometheus::BuildGauge()
                       .Name("gemm_shm_region_bytes")
                       .Help("Bytes of the shared-memory regions registered, all tenants")
                       .Register(*registry_)
                       .Add({});
  regions_ = &prometheus::BuildGauge()
                  .Name("gemm_shm_regions")
                  .Help("Shared-memory regions registered, all tenants")
                  .Register(*registry_)
                  .Add({});
  auto& stream_requests = prometheus::BuildCounter()
                              .Name("gemm_stream_requests_total")
                              .Help("Requests that came on a MatmulStream, by status code")
                              .Register(*registry_);
  for (int c = 0; c < kNumCodes; ++c) {
    stream_requests_[c] = &stream_requests.Add(
        {{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}});
  }
  open_streams_ = &prometheus::BuildGauge()
                       .Name("gemm_open_streams")
                       .Help("MatmulStreams open")
                       .Register(*registry_)
                       .Add({});
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("gemm_queue_depth")
                      .Help("Jobs waiting for a device")
                      .Register(*registry_)
                      .Add({});
  inflight_ = &prometheus::BuildGauge()
                   .Name("gemm_inflight_requests")
                   .Help("Requests accepted and not yet answered")
                   .Register(*registry_)
                   .Add({});
  bytes_received_ = &prometheus::BuildCounter()
                         .Name("gemm_bytes_received_total")
                         .Help("Tensor payload bytes received in requests")
                         .Register(*registry_)
                         .Add({});
  bytes_sent_ = &prometheus::BuildCounter()
                     .Name("gemm_bytes_sent_total")
                     .Help("Tensor payload bytes sent in responses")
                     .Register(*registry_)
                     .Add({});
  auto& flops = prometheus::BuildCounter()
                    .Name("gemm_flops_total")
                    .Help("Floating-point operations computed (2*M*N*K per item)")
                    .Register(*registry_);
  auto& busy = prometheus::BuildCounter()
                   .Name("gemm_device_busy_seconds_total")
                   .Help("Time a device spent running launches")
                   .Register(*registry_);
  auto& healthy = prometheus::BuildGauge()
                      .Name("gemm_device_healthy")
                      .Help("1 while the device takes work, 0 once it faulted")
                      .Register(*registry_);
  auto& memory = prometheus::BuildGauge()
                     .Name("gemm_device_memory_bytes")
                     .Help("Memory a device holds: pool = device memory of the pool, limit = "
                           "the pool's cap, pinned = page-locked host staging buffers")
                     .Register(*registry_);
  auto& store = prometheus::BuildGauge()
                    .Name("gemm_tensor_store_bytes")
                    .Help("Memory of resident tensors on a device (uploads in progress and "
                          "deleted tensors still used by a job included)")
                    .Register(*registry_);
  auto& tensors = prometheus::BuildGauge()
                      .Name("gemm_tensor_store_tensors")
                      .Help("Resident tensors on a device")
                      .Register(*registry_);
  tensors_expired_ = &prometheus::BuildCounter()
                          .Name("gemm_tensor_store_expired_total")
                          .Help("Resident tensors removed because their TTL passed")
                          .Register(*registry_)
                          .Add({});
  upload_bytes_ = &prometheus::BuildCounter()
                       .Name("gemm_tensor_upload_bytes_total")
                       .Help("Tensor bytes stored by PutTensor")
                       .Register(*registry_)
                       .Add({});
  upload_seconds_ = &prometheus::BuildHistogram()
                         .Name("gemm_tensor_upload_duration_seconds")
                         .Help("Time of one successful PutTensor stream, first chunk to last")
                         .Register(*registry_)
                         .Add({}, DurationBuckets());
  relayout_seconds_ = &prometheus::BuildHistogram()
                           .Name("gemm_tensor_relayout_duration_seconds")
                           .Help(
                               "Time to re-lay out one quantized tensor for its kernels at "
                               "the end of its upload (part of the upload's time)")
                           .Register(*registry_)
                           .Add({}, DurationBuckets());
  for (int d = 0; d < num_devices; ++d) {
    const std::string device = absl::StrCat(device_labels[d]);
    store_.push_back({&store.Add({{"device", device}}), &tensors.Add({{"device", device}})});
    std::array<prometheus::Counter*, kNumPrecisions> per_precision{};
    for (int p = 0; p < kNumPrecisions; ++p) {
      per_precision[p] =
          &flops.Add({{"precision", PrecisionName(static_cast<Precision>(p))}, {"device", device}});
    }
    flops_.push_back(per_precision);
    busy_seconds_.push_back(&busy.Add({{"device", device}}));
    healthy_.push_back(&healthy.Add({{"device", device}}));
    healthy_.back()->Set(1);
    memory_.push_back({&memory.Add({{"device", device}, {"kind", "pool"}}),
                       &memory.Add({{"device", device}, {"kind", "limit"}}),
                       &memory.Add({{"device", device}, {"kind", "pinned"}})});
  }
}

void ServerMetrics::RecordStreamRequest(absl::StatusCode code) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  stream_requests_[c]->Increment();
}

void ServerMetrics::RecordRequest(RpcMethod method, PrecisionLabel precision,
                                  absl::StatusCode code, absl::string_view tenant) {
  const int m = static_cast<int>(method);
  int p = precision.index();
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  prometheus::Counter* counter = requests_[m][p][c];
  // A label that does not apply to the method is a caller's slip: count it as NONE.
  if (counter == nullptr) {
    p = PrecisionLabel::None().index();
    counter = requests_[m][p][c];
  }
  if (!tenant.empty()) {
    const std::string key = absl::StrCat(tenant, "/", m, "/", p, "/", c);
    absl::MutexLock lock(&tenant_mu_);
    prometheus::Counter*& tenant_counter = tenant_requests_[key];
    if (tenant_counter == nullptr) {
      tenant_counter = &requests_family_->Add(
          {{"method", RpcMethodName(method)},
           {"precision", PrecisionLabel::FromIndex(p).name()},
           {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))},
           {"tenant", std::string(tenant)}});
    }
    counter = tenant_counter;
  }
  counter->Increment();
}

void ServerMetrics::ObservePhase(RpcMethod method, Phase phase, absl::Duration duration) {
  prometheus::Histogram* histogram = durations_[static_cast<int>(method)][static_cast<int>(phase)];
  if (histogram != nullptr) histogram->Observe(absl::ToDoubleSeconds(duration));
}

void ServerMetrics::AddDeviceWork(int device, Precision precision, double flops,
                                  absl::Duration busy) {
  if (device < 0 || device >= static_cast<int>(flops_.size())) return;
  flops_[device][static_cast<int>(precision)]->Increment(flops);
  busy_seconds_[device]->Increment(absl::ToDoubleSeconds(busy));
}

void ServerMetrics::SetDeviceHealthy(int device, bool healthy) {
  if (device < 0 || device >= static_cast<int>(healthy_.size())) return;
  healthy_[device]->Set(healthy ? 1 : 0);
}

void ServerMetrics::SetDeviceMemory(int device, int64_t pool_bytes, int64_t limit_bytes,
                                    int64_t pinned_bytes) {
  if (device < 0 || device >= static_cast<int>(memory_.size())) return;
  memory_[device][0]->Set(static_cast<double>(pool_bytes));
  memory_[device][1]->Set(static_cast<double>(limit_bytes));
  memory_[device][2]->Set(static_cast<double>(pinned_bytes));
}

void ServerMetrics::SetTensorStoreBytes(int device, int64_t bytes) {
  if (device < 0 || device >= static_cast<int>(store_.size())) return;
  store_[device][0]->Set(static_cast<double>(bytes));
}

void ServerMetrics::SetTensorStoreTensors(int device, int64_t tensors) {
  if (device < 0 || device >= static_cast<int>(store_.size())) return;
  store_[device][1]->Set(static_cast<double>(tensors));
}

void ServerMetrics::ObserveRelayout(absl::Duration duration) {
  relayout_seconds_->Observe(absl::ToDoubleSeconds(duration));
}

void ServerMetrics::ObserveUpload(int64_t bytes, absl::Duration duration) {
  upload_bytes_->Increment(static_cast<double>(bytes));
  upload_seconds_->Observe(absl::ToDoubleSeconds(duration));
}

}  // namespace gemmd
