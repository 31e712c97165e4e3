// Prometheus metrics of the server (the README lists them). Every label set is bounded and
// created in the constructor (unused ones export 0), so the hot path only indexes an array
// and bumps an atomic. Thread-safe.
//
// gemm_requests_total{method,precision,code}        counter (precision: PrecisionLabel)
// gemm_request_duration_seconds{method,phase}        histogram (queue, copy_in, compute,
//                                                    copy_out, total)
// gemm_batch_size                                    histogram (requests per launch)
// gemm_queue_depth                                   gauge (jobs waiting for a device)
// gemm_inflight_requests                             gauge (accepted, not yet answered)
// gemm_flops_total{precision,device}                 counter
// gemm_bytes_received_total / gemm_bytes_sent_total  counters (tensor payload bytes)
// gemm_device_busy_seconds_total{device}             counter
// gemm_device_memory_bytes{device,kind}              gauge (kind: pool = device memory
//                                                    held, limit = its cap, pinned =
//                                                    page-locked host staging)
// gemm_device_healthy{device}                        gauge (1/0)
// gemm_tensor_store_bytes{device}                    gauge (resident tensors' memory,
//                                                    uploads in progress included)
// gemm_tensor_store_tensors{device}                  gauge (resident tensors)
// gemm_tensor_store_expired_total                    counter (removed by their TTL)
// gemm_tensor_upload_bytes_total                     counter (PutTensor bytes stored)
// gemm_tensor_upload_duration_seconds                histogram (one PutTensor stream)
// gemm_tensor_relayout_duration_seconds              histogram (one quantized tensor
//                                                    re-laid out for its kernels at the
//                                                    end of its upload; in the above too)
// gemm_shm_region_bytes / gemm_shm_regions           gauges (shared-memory regions
//                                                    registered, all tenants)
// gemm_stream_requests_total{code}                   counter (the requests that came on a
//                                                    MatmulStream, also counted in
//                                                    gemm_requests_total as their method)
// gemm_open_streams                                  gauge (MatmulStreams open)
#ifndef GEMMD_SERVER_OBSERVABILITY_METRICS_H_
#define GEMMD_SERVER_OBSERVABILITY_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"

namespace gemmd {

enum class RpcMethod {
  kMatmul,
  kQuantizedMatmul,
  kGetServerInfo,
  kPutTensor,
  kGetTensor,
  kDeleteTensor,
  kListTensors,
  kRegisterRegion,
  kUnregisterRegion,
  kListRegions,
  kMatmulStream,  // the stream itself; each request on it counts as a Matmul or QuantizedMatmul
};
inline constexpr int kNumRpcMethods = 11;
// The GEMM methods (they have device phases and a precision label).
inline bool IsGemmMethod(RpcMethod m) {
  return m == RpcMethod::kMatmul || m == RpcMethod::kQuantizedMatmul;
}
const char* RpcMethodName(RpcMethod method);

// The `precision` label of gemm_requests_total: a Matmul's precision (FP32,
// FP16_TENSOR), a QuantizedMatmul's weight format (INT8, NVFP4), or NONE when the
// request failed before it was known.
class PrecisionLabel {
 public:
  static constexpr int kCount = kNumPrecisions + kNumQuantFormats + 1;
  static PrecisionLabel None() { return PrecisionLabel(kCount - 1); }
  static PrecisionLabel Of(Precision p) { return PrecisionLabel(static_cast<int>(p)); }
  static PrecisionLabel Of(QuantFormat f) {
    return PrecisionLabel(kNumPrecisions + static_cast<int>(f));
  }
  static PrecisionLabel Of(std::optional<Precision> p) { return p ? Of(*p) : None(); }
  static PrecisionLabel FromIndex(int index) { return PrecisionLabel(index); }
  int index() const { return index_; }
  const char* name() const;
  // Whether requests of `method` carry this label: Matmul a precision, QuantizedMatmul a
  // format, each of them NONE too; the other methods NONE alone.
  bool AppliesTo(RpcMethod method) const;

 private:
  explicit PrecisionLabel(int index) : index_(index) {}
  int index_;
};

enum class Phase { kQueue, kCopyIn, kCompute, kCopyOut, kTotal };
inline constexpr int kNumPhases = 5;

class ServerMetrics {
 public:
  // Devices are addressed by position; their `device` label is the given one (a GPU's
  // ordinal), or the position with the first constructor.
  explicit ServerMetrics(int num_devices);
  explicit ServerMetrics(const std::vector<int>& device_labels);
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // `tenant`: the authenticated caller's tenant; empty (no authentication, or a call
  // refused before it was known) counts in the series without a tenant label. Tenants come
  // from the server's tokens file, so the label's values are bounded by it.
  void RecordRequest(RpcMethod method, PrecisionLabel precision, absl::StatusCode code,
                     absl::string_view tenant = {});
  // precision: nullopt when the request failed before it was known.
  void RecordRequest(RpcMethod method, std::optional<Precision> precision, absl::StatusCode code,
                     absl::string_view tenant = {}) {
    RecordRequest(method, PrecisionLabel::Of(precision), code, tenant);
  }
  void ObservePhase(RpcMethod method, Phase phase, absl::Duration duration);
  void AddInflight(int delta) { inflight_->Increment(delta); }
  int64_t inflight() const { return static_cast<int64_t>(inflight_->Value()); }
  void SetQueueDepth(int64_t depth) { queue_depth_->Set(static_cast<double>(depth)); }
  void ObserveBatch(int64_t size) { batch_size_->Observe(static_cast<double>(size)); }
  void AddDeviceWork(int device, Precision precision, double flops, absl::Duration busy);
  void SetDeviceHealthy(int device, bool healthy);
  // gemm_device_memory_bytes{kind="pool"|"limit"|"pinned"} of one device.
  void SetDeviceMemory(int device, int64_t pool_bytes, int64_t limit_bytes, int64_t pinned_bytes);
  void AddBytesReceived(int64_t bytes) { bytes_received_->Increment(static_cast<double>(bytes)); }
  void AddBytesSent(int64_t bytes) { bytes_sent_->Increment(static_cast<double>(bytes)); }
  // The tensor store of one device.
  void SetTensorStoreBytes(int device, int64_t bytes);
  void SetTensorStoreTensors(int device, int64_t tensors);
  void AddTensorsExpired(int64_t count) { tensors_expired_->Increment(static_cast<double>(count)); }
  void ObserveUpload(int64_t bytes, absl::Duration duration);
  void ObserveRelayout(absl::Duration duration);
  // The shared-memory regions registered (all tenants).
  void RecordStreamRequest(absl::StatusCode code);
  void AddOpenStreams(int delta) { open_streams_->Increment(delta); }
  int64_t open_streams() const { return static_cast<int64_t>(open_streams_->Value()); }
  void SetRegions(int64_t bytes, int64_t regions) {
    region_bytes_->Set(static_cast<double>(bytes));
    regions_->Set(static_cast<double>(regions));
  }

 private:
  static constexpr int kNumCodes = 17;

  std::shared_ptr<prometheus::Registry> registry_;
  // [method][precision label][code]; nullptr where the label does not apply to the method.
  std::array<std::array<std::array<prometheus::Counter*, kNumCodes>, PrecisionLabel::kCount>,
             kNumRpcMethods>
      requests_{};
  // With a tenant label: made on first use, one per (tenant, method, precision, code).
  prometheus::Family<prometheus::Counter>* requests_family_ = nullptr;
  absl::Mutex tenant_mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> tenant_requests_
      ABSL_GUARDED_BY(tenant_mu_);
  std::array<std::array<prometheus::Histogram*, kNumPhases>, kNumRpcMethods> durations_{};
  prometheus::Histogram* batch_size_;
  prometheus::Gauge* queue_depth_;
  prometheus::Gauge* inflight_;
  prometheus::Counter* bytes_received_;
  prometheus::Counter* bytes_sent_;
  std::vector<std::array<prometheus::Counter*, kNumPrecisions>> flops_;  // [device][precision]
  std::vector<prometheus::Counter*> busy_seconds_;
  std::vector<prometheus::Gauge*> healthy_;
  std::vector<std::array<prometheus::Gauge*, 3>> memory_;  // [device][pool, limit, pinned]
  std::vector<std::array<prometheus::Gauge*, 2>> store_;   // [device][bytes, tensors]
  prometheus::Counter* tensors_expired_;
  prometheus::Counter* upload_bytes_;
  prometheus::Histogram* upload_seconds_;
  prometheus::Histogram* relayout_seconds_;
  prometheus::Gauge* region_bytes_;
  prometheus::Gauge* regions_;
  std::array<prometheus::Counter*, kNumCodes> stream_requests_{};
  prometheus::Gauge* open_streams_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_OBSERVABILITY_METRICS_H_
