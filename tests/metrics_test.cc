// ServerMetrics: every bounded label set exists from the start (at 0), so the hot path
// never creates series, and each request lands in exactly one of them.
#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "server/observability/metrics.h"
#include "tests/metrics_util.h"

namespace gemmd {
namespace {

using testing::MetricValue;

int RequestSeries(ServerMetrics& metrics) {
  int series = 0;
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name == "gemm_requests_total") series += static_cast<int>(family.metric.size());
  }
  return series;
}

TEST(ServerMetricsTest, RequestLabelSetsExistUpFrontAtZero) {
  ServerMetrics metrics(1);
  // Matmul: FP32, FP16_TENSOR, FP64, NONE; QuantizedMatmul: INT8, NVFP4, NONE; GetServerInfo,
  // PutTensor, GetTensor, DeleteTensor, ListTensors, RegisterRegion, UnregisterRegion,
  // ListRegions, MatmulStream: NONE; each with the 17 status codes.
  EXPECT_EQ(RequestSeries(metrics), 16 * 17);
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "Matmul"}, {"precision", "FP16_TENSOR"}, {"code", "UNAVAILABLE"}}),
            0);
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "QuantizedMatmul"}, {"precision", "FP32"}}),
            -1);
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "GetServerInfo"}, {"precision", "NVFP4"}}),
            -1);
}

TEST(ServerMetricsTest, EachRequestCountsOnceUnderItsLabels) {
  ServerMetrics metrics(1);
  metrics.RecordRequest(RpcMethod::kMatmul, Precision::kFp32, absl::StatusCode::kOk);
  metrics.RecordRequest(RpcMethod::kMatmul, Precision::kFp32, absl::StatusCode::kOk);
  metrics.RecordRequest(RpcMethod::kQuantizedMatmul, PrecisionLabel::Of(QuantFormat::kNvfp4),
                        absl::StatusCode::kInvalidArgument);
  // A label that does not apply to the method counts as NONE.
  metrics.RecordRequest(RpcMethod::kGetServerInfo, Precision::kFp32, absl::StatusCode::kOk);
  // A code outside the canonical ones counts as UNKNOWN.
  metrics.RecordRequest(RpcMethod::kMatmul, std::nullopt, static_cast<absl::StatusCode>(99));
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "Matmul"}, {"precision", "FP32"}, {"code", "OK"}}),
            2);
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "QuantizedMatmul"}, {"precision", "NVFP4"},
                         {"code", "INVALID_ARGUMENT"}}),
            1);
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "GetServerInfo"}, {"precision", "NONE"}, {"code", "OK"}}),
            1);
  EXPECT_EQ(MetricValue(metrics, "gemm_requests_total",
                        {{"method", "Matmul"}, {"precision", "NONE"}, {"code", "UNKNOWN"}}),
            1);
  EXPECT_EQ(RequestSeries(metrics), 16 * 17);
}

TEST(ServerMetricsTest, StreamRequestsByCodeAndOpenStreams) {
  ServerMetrics metrics(1);
  metrics.RecordStreamRequest(absl::StatusCode::kOk);
  metrics.RecordStreamRequest(absl::StatusCode::kOk);
  metrics.RecordStreamRequest(absl::StatusCode::kDeadlineExceeded);
  metrics.RecordStreamRequest(static_cast<absl::StatusCode>(99));
  EXPECT_EQ(MetricValue(metrics, "gemm_stream_requests_total", {{"code", "OK"}}), 2);
  EXPECT_EQ(MetricValue(metrics, "gemm_stream_requests_total", {{"code", "DEADLINE_EXCEEDED"}}),
            1);
  EXPECT_EQ(MetricValue(metrics, "gemm_stream_requests_total", {{"code", "UNKNOWN"}}), 1);
  EXPECT_EQ(MetricValue(metrics, "gemm_stream_requests_total", {{"code", "CANCELLED"}}), 0);
  metrics.AddOpenStreams(2);
  metrics.AddOpenStreams(-1);
  EXPECT_EQ(metrics.open_streams(), 1);
  EXPECT_EQ(MetricValue(metrics, "gemm_open_streams", {}), 1);
}

TEST(ServerMetricsTest, DeviceMemoryGaugesByKind) {
  ServerMetrics metrics(std::vector<int>{3});
  metrics.SetDeviceMemory(0, 100, 200, 300);
  EXPECT_EQ(MetricValue(metrics, "gemm_device_memory_bytes", {{"device", "3"}, {"kind", "pool"}}),
            100);
  EXPECT_EQ(MetricValue(metrics, "gemm_device_memory_bytes", {{"device", "3"}, {"kind", "limit"}}),
            200);
  EXPECT_EQ(
      MetricValue(metrics, "gemm_device_memory_bytes", {{"device", "3"}, {"kind", "pinned"}}), 300);
  metrics.SetDeviceMemory(1, 1, 1, 1);  // no such device: ignored
}

}  // namespace
}  // namespace gemmd
