// The whole server in-process on 127.0.0.1:0, called through real gRPC channels: each RPC,
// each error code, malformed input, a 4096x4096 request, health, /metrics over HTTP, and
// a shutdown while requests are in flight.
#include <arpa/inet.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "server/scheduling/batcher.h"
#include "server/devices/cpu/cpu_device.h"
#include "server/gemm_server.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "tests/fake_device.h"
#include "tests/metrics_util.h"
#include "tests/server_fixture.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::AsyncCall;
using ::gemmd::testing::ChannelTo;
using ::gemmd::testing::FakeDevice;
using ::gemmd::testing::HttpGet;
using ::gemmd::testing::MetricValue;
using ::gemmd::testing::RandomBytes;
using ::gemmd::testing::RandomRequest;
using ::gemmd::testing::RequestsCounted;
using ::gemmd::testing::ScrapedValue;
using ::gemmd::testing::SetTensor;
using ::gemmd::testing::TestConfig;

class ServerTest : public ::gemmd::testing::InProcessServerTest {
 protected:
  void SetUp() override { SetLogEnabled(false); }

  std::string HealthStatus() {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = health->Check(&context, {}, &response);
    if (!status.ok()) return absl::StrCat("rpc error ", status.error_code());
    return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  }
};

TEST_F(ServerTest, MatmulMatchesFp64Reference) {
  Start();
  for (const auto& [precision, tolerance] :
       {std::pair{gemm::v1::PRECISION_FP32, 1e-5}, {gemm::v1::PRECISION_FP16_TENSOR, 1e-3}}) {
    std::mt19937_64 rng(7);
    gemm::v1::MatmulRequest request;
    // op(A) = [129, 65] stored transposed, op(B) = [65, 127] stored transposed; beta != 0.
    SetTensor(request.mutable_a(), {65, 129}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, 65 * 129, rng));
    SetTensor(request.mutable_b(), {127, 65}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, 127 * 65, rng));
    SetTensor(request.mutable_c(), {129, 127}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, 129 * 127, rng));
    request.set_transpose_a(true);
    request.set_transpose_b(true);
    request.set_alpha(0.75f);
    request.set_beta(-1.5f);
    request.set_precision(precision);
    gemm::v1::MatmulResponse response;
    ASSERT_TRUE(Call(request, &response).ok());

    GemmProblem p;
    p.m = 129;
    p.n = 127;
    p.k = 65;
    p.transpose_a = p.transpose_b = true;
    p.alpha = 0.75f;
    p.beta = -1.5f;
    const std::vector<double> ref = ReferenceGemm(
        p,
        {request.a().data().data(), request.b().data().data(), request.c().data().data(), nullptr});
    ASSERT_EQ(response.c().data().size(), 129u * 127 * 4);
    EXPECT_EQ(response.c().shape_size(), 2);
    EXPECT_EQ(response.c().dtype(), gemm::v1::DATA_TYPE_FLOAT32);
    EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat32, 129 * 127),
              tolerance);
    EXPECT_EQ(response.precision(), precision);
    EXPECT_EQ(response.kernel(),
              precision == gemm::v1::PRECISION_FP32 ? kCpuSgemmKernel : kCpuTensorKernel);
    EXPECT_TRUE(absl::StartsWith(response.device(), "cpu:0")) << response.device();
    EXPECT_EQ(response.timing().batch_size(), 1u);
    EXPECT_GE(response.timing().total_us(),
              response.timing().queue_us() + response.timing().compute_us());
  }
}

// With --prepare_inline_max_bytes=0 every request is prepared on the preparer threads
// (by default only those over 1 MiB): answers, errors and concurrent calls are the same.
TEST_F(ServerTest, RequestsPreparedOnThePreparerThreadsGetTheSameAnswers) {
  ServerConfig config = TestConfig();
  config.prepare_inline_max_bytes = 0;
  Start(config);
  std::mt19937_64 rng(3);
  std::vector<gemm::v1::MatmulRequest> requests;
  std::vector<gemm::v1::MatmulResponse> responses(12);
  std::vector<grpc::Status> statuses(12);
  for (int i = 0; i < 12; ++i) {
    gemm::v1::MatmulRequest request;
    const int64_t m = 1 + i, n = 17, k = 33;
    SetTensor(request.mutable_a(), {m, k}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, m * k, rng));
    SetTensor(request.mutable_b(), {k, n}, DataType::kFloat32,
              RandomBytes(DataType::kFloat32, k * n, rng));
    requests.push_back(std::move(request));
  }
  std::vector<std::thread> callers;
  for (int i = 0; i < 12; ++i) {
    callers.emplace_back([&, i] { statuses[i] = Call(requests[i], &responses[i]); });
  }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    GemmProblem p;
    p.m = 1 + i;
    p.n = 17;
    p.k = 33;
    const std::vector<double> ref =
        ReferenceGemm(p, {requests[i].a().data().data(), requests[i].b().data().data(),
                          nullptr, nullptr});
    EXPECT_LE(RelativeError(ref.data(), responses[i].c().data().data(), DataType::kFloat32,
                            p.m * p.n),
              1e-5)
        << "call " << i;
  }
  gemm::v1::MatmulRequest bad = requests[0];
  bad.mutable_b()->set_data("short");
  gemm::v1::MatmulResponse response;
  const grpc::Status status = Call(bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "b.data has 5 bytes")) << status.error_message();
}

TEST_F(ServerTest, HalfInputsAndHalfOutput) {
  Start();
  gemm::v1::MatmulRequest request = RandomRequest(33, 17, 64, 3, DataType::kBFloat16);
  request.set_output_dtype(gemm::v1::DATA_TYPE_FLOAT16);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(Call(request, &response).ok());
  EXPECT_EQ(response.precision(), gemm::v1::PRECISION_FP16_TENSOR);  // AUTO for BF16 inputs
  EXPECT_EQ(response.c().dtype(), gemm::v1::DATA_TYPE_FLOAT16);
  GemmProblem p;
  p.m = 33;
  p.n = 17;
  p.k = 64;
  p.a_type = p.b_type = DataType::kBFloat16;
  const std::vector<double> ref =
      ReferenceGemm(p, {request.a().data().data(), request.b().data().data(), nullptr, nullptr});
  EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat16, 33 * 17),
            1e-3);
}

// Pooled messages carry buffers from call to call: results of every size must come back
// exact (length and values), whatever came before.
TEST_F(ServerTest, ResultsStayExactAcrossReusedBuffers) {
  Start();
  for (const auto& [m, n, k] : {std::tuple{64, 48, 40}, {8, 8, 8}, {96, 64, 16}, {1, 1, 3},
                                 {64, 48, 40}, {33, 17, 9}}) {
    const gemm::v1::MatmulRequest request = RandomRequest(m, n, k, 1000 + m);
    gemm::v1::MatmulResponse response;
    ASSERT_TRUE(Call(request, &response).ok());
    ASSERT_EQ(response.c().data().size(), static_cast<size_t>(m * n * 4));
    GemmProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    const std::vector<double> ref = ReferenceGemm(
        p, {request.a().data().data(), request.b().data().data(), nullptr, nullptr});
    EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat32, m * n),
              1e-5)
        << m << "x" << n << "x" << k;
  }
}

// The NaN/Inf rules the README states, on the CPU backend: a NaN in a row of A makes that
// row of C NaN and leaves the others finite; FP16_TENSOR turns inputs past 65504 into
// Inf; alpha = 0 is not special (0 * NaN is NaN), small problem or large. (The outside
// probe saw a NaN vanish with alpha = 0, where OpenBLAS skipped the product; a 4-row
// problem kept it.)
TEST_F(ServerTest, NanAndInfFollowTheDocumentedRules) {
  Start();
  auto c_of = [&](const gemm::v1::MatmulRequest& r) {
    gemm::v1::MatmulResponse response;
    EXPECT_TRUE(Call(r, &response).ok());
    std::vector<float> c(response.c().data().size() / 4);
    std::memcpy(c.data(), response.c().data().data(), response.c().data().size());
    return c;
  };
  gemm::v1::MatmulRequest r = RandomRequest(4, 3, 5, 21);
  float* a = reinterpret_cast<float*>(r.mutable_a()->mutable_data()->data());
  a[1 * 5 + 2] = std::nanf("");  // row 1 of A
  std::vector<float> c = c_of(r);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(std::isnan(c[i * 3 + j]), i == 1) << i << "," << j;
  }
  a[1 * 5 + 2] = 70000.0f;  // beyond FP16's 65504
  r.set_precision(gemm::v1::PRECISION_FP16_TENSOR);
  c = c_of(r);
  for (int j = 0; j < 3; ++j) EXPECT_FALSE(std::isfinite(c[1 * 3 + j])) << j;
  EXPECT_TRUE(std::isfinite(c[0]));
  a[1 * 5 + 2] = std::nanf("");
  r.set_precision(gemm::v1::PRECISION_FP32);
  r.set_alpha(0.0f);
  for (int64_t m : {4, 512}) {
    gemm::v1::MatmulRequest big = RandomRequest(m, 300, 64, 22);
    reinterpret_cast<float*>(big.mutable_a()->mutable_data()->data())[1 * 64 + 2] =
        std::nanf("");
    big.set_alpha(0.0f);
    c = c_of(big);
    for (int64_t i = 0; i < m; ++i) {
      for (int j = 0; j < 300; ++j) {
        const float v = c[static_cast<size_t>(i * 300 + j)];
        if (i == 1) {
          EXPECT_TRUE(std::isnan(v)) << m << ": " << i << "," << j;
        } else {
          EXPECT_EQ(v, 0.0f) << m << ": " << i << "," << j;
        }
      }
    }
  }
}

TEST_F(ServerTest, GetServerInfoDescribesTheServer) {
  ServerConfig config = TestConfig();
  config.max_elements = 12345678;
  config.max_queue_size = 77;
  config.max_batch_size = 32;
  config.max_queue_delay = absl::Microseconds(250);
  config.max_inflight_bytes = int64_t{1} << 30;
  Start(config);
  grpc::ClientContext context;
  gemm::v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.version(), kGemmdVersion);
  EXPECT_EQ(info.backend(), "cpu");
  ASSERT_EQ(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).kind(), "cpu");
  EXPECT_TRUE(info.devices(0).healthy());
  EXPECT_GE(info.devices(0).threads(), 1);
  ASSERT_EQ(info.kernels_size(), 3);
  EXPECT_EQ(info.kernels(0).name(), kCpuSgemmKernel);
  EXPECT_EQ(info.kernels(1).precision(), gemm::v1::PRECISION_FP16_TENSOR);
  EXPECT_EQ(info.kernels(2).name(), kCpuDgemmKernel);
  EXPECT_EQ(info.kernels(2).precision(), gemm::v1::PRECISION_FP64);
  EXPECT_EQ(info.limits().max_elements(), 12345678);
  EXPECT_EQ(info.limits().max_queue_size(), 77u);
  EXPECT_EQ(info.limits().max_message_bytes(), int64_t{512} << 20);
  EXPECT_EQ(info.limits().max_batch_size(), 32u);
  EXPECT_EQ(info.limits().max_queue_delay_us(), 250);
  EXPECT_EQ(info.limits().max_inflight_bytes(), int64_t{1} << 30);
}

// FLOAT64 in, FP64 arithmetic, FLOAT64 out, with alpha and beta that FP32 cannot hold:
// within 1e-13 of the long-double reference, counted under the FP64 label.
TEST_F(ServerTest, Float64MatmulComputesInFp64) {
  Start();
  std::mt19937_64 rng(11);
  gemm::v1::MatmulRequest request;
  SetTensor(request.mutable_a(), {65, 129}, DataType::kFloat64,
            RandomBytes(DataType::kFloat64, 65 * 129, rng));
  SetTensor(request.mutable_b(), {127, 65}, DataType::kFloat64,
            RandomBytes(DataType::kFloat64, 127 * 65, rng));
  SetTensor(request.mutable_c(), {129, 127}, DataType::kFloat64,
            RandomBytes(DataType::kFloat64, 129 * 127, rng));
  request.set_transpose_a(true);
  request.set_transpose_b(true);
  request.set_alpha_f64(1.0 / 3.0);
  request.set_beta_f64(-0.1);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(Call(request, &response).ok());

  GemmProblem p;
  p.m = 129;
  p.n = 127;
  p.k = 65;
  p.transpose_a = p.transpose_b = true;
  p.a_type = p.b_type = p.c_type = DataType::kFloat64;
  p.precision = Precision::kFp64;
  p.alpha = 1.0 / 3.0;
  p.beta = -0.1;
  const std::vector<double> ref = ReferenceGemm(
      p,
      {request.a().data().data(), request.b().data().data(), request.c().data().data(), nullptr});
  ASSERT_EQ(response.c().data().size(), 129u * 127 * 8);
  EXPECT_EQ(response.c().dtype(), gemm::v1::DATA_TYPE_FLOAT64);
  EXPECT_EQ(response.precision(), gemm::v1::PRECISION_FP64);
  EXPECT_EQ(response.kernel(), kCpuDgemmKernel);
  EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat64, 129 * 127),
            1e-13);
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(5)));  // the call counted
  EXPECT_EQ(MetricValue(server_->metrics(), "gemm_requests_total",
                        {{"method", "Matmul"}, {"precision", "FP64"}, {"code", "OK"}}),
            1);
}

TEST_F(ServerTest, ConcurrentRequestsShareLaunchesAndGetTheirOwnResults) {
  ServerConfig config = TestConfig();
  config.max_batch_size = 16;
  // Long enough that all 16 calls (sent back to back) arrive before the first launch,
  // and held for it even when the device is idle.
  config.max_queue_delay = absl::Milliseconds(500);
  config.wait_when_idle = true;
  Start(config);
  constexpr int kCalls = 16;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<AsyncCall>());
    calls.back()->request = RandomRequest(24, 20, 12, 100 + i);
    calls.back()->Start(stub_.get());
  }
  uint32_t largest_batch = 0;
  for (const auto& call : calls) {
    call->done.WaitForNotification();
    ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    GemmProblem p;
    p.m = 24;
    p.n = 20;
    p.k = 12;
    const std::vector<double> ref = ReferenceGemm(
        p, {call->request.a().data().data(), call->request.b().data().data(), nullptr, nullptr});
    EXPECT_LE(
        RelativeError(ref.data(), call->response.c().data().data(), DataType::kFloat32, 24 * 20),
        1e-5);
    largest_batch = std::max(largest_batch, call->response.timing().batch_size());
  }
  EXPECT_GE(largest_batch, 2u);
  EXPECT_EQ(server_->executor().InflightBytes(), 0);
}

// Matmuls are served on gRPC's completion queues, one poller thread each: with several,
// calls arriving together on different queues still get their own answers, and each is
// counted once.
TEST_F(ServerTest, SeveralCallQueuesAnswerEachCallWithItsOwnResult) {
  ServerConfig config = TestConfig();
  config.call_queue_threads = 4;
  Start(config);
  constexpr int kCalls = 64;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<AsyncCall>());
    calls.back()->request = RandomRequest(8 + i % 5, 6 + i % 3, 4 + i % 7, 300 + i);
    calls.back()->Start(stub_.get());
  }
  for (int i = 0; i < kCalls; ++i) {
    AsyncCall& call = *calls[i];
    call.done.WaitForNotification();
    ASSERT_TRUE(call.status.ok()) << call.status.error_message();
    GemmProblem p;
    p.m = 8 + i % 5;
    p.n = 6 + i % 3;
    p.k = 4 + i % 7;
    const std::vector<double> ref = ReferenceGemm(
        p, {call.request.a().data().data(), call.request.b().data().data(), nullptr, nullptr});
    EXPECT_LE(RelativeError(ref.data(), call.response.c().data().data(), DataType::kFloat32,
                            p.m * p.n),
              1e-5)
        << "call " << i;
  }
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(RequestsCounted(server_->metrics(), "Matmul", "OK"), kCalls);
  EXPECT_EQ(server_->executor().InflightBytes(), 0);
}

TEST(ServerConfigTest, CallQueueThreadsOutOfRangeAreRefused) {
  for (int threads : {-1, 65}) {
    ServerConfig config = TestConfig();
    config.call_queue_threads = threads;
    absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(server.status().message(),
              "--call_queue_threads must be in [0, 64] (0 = half the cores, 1 to 8)");
  }
}

// Checked whatever the backend, so a bad value fails the same on every machine.
TEST(ServerConfigTest, CudaLanesOutOfRangeAreRefused) {
  for (int lanes : {0, 17}) {
    ServerConfig config = TestConfig();
    config.cuda_lanes = lanes;
    absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(server.status().message(),
              absl::StrCat("--cuda_lanes=", lanes, " is not in [1, 16]"));
  }
}

TEST_F(ServerTest, WithNoHealthyDeviceHealthIsNotServingAndCallsAreUnavailable) {
  auto device = std::make_unique<FakeDevice>();
  device->FailWith(absl::InternalError("cuda:0 fault: unspecified launch failure"),
                   /*fault=*/true);
  Start(TestConfig(), std::move(device));
  ASSERT_EQ(HealthStatus(), "SERVING");
  gemm::v1::MatmulResponse response;
  grpc::Status s = Call(RandomRequest(4, 4, 4, 1), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(s.error_message(), "cuda:0 fault: unspecified launch failure");
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (HealthStatus() == "SERVING" && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(HealthStatus(), "NOT_SERVING");
  s = Call(RandomRequest(4, 4, 4, 2), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(), "no healthy device: every device of this server has faulted");
  grpc::ClientContext context;
  gemm::v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
  EXPECT_FALSE(info.devices(0).healthy());
}

TEST_F(ServerTest, ErrorCodesAndMessagesReachTheClient) {
  ServerConfig config = TestConfig();
  config.max_elements = 1 << 20;
  config.max_message_bytes = 8 << 20;
  Start(config);
  gemm::v1::MatmulResponse response;

  gemm::v1::MatmulRequest r = RandomRequest(16, 16, 16, 1);
  r.mutable_a()->mutable_data()->resize(1000);
  grpc::Status s = Call(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "a.data has 1000 bytes; shape [16,16] FLOAT32 needs 1024");
  EXPECT_FALSE(response.has_c());

  r = RandomRequest(8, 8, 8, 1);
  r.set_kernel("sgemm_imaginary");
  s = Call(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "no kernel named 'sgemm_imaginary' on this server; Matmul kernels: "
            "cpu_sgemm_openblas, cpu_hgemm_emulated_openblas, cpu_dgemm_openblas; "
            "QuantizedMatmul kernels: "
            "cpu_weight_only_sgemm_openblas");

  r = RandomRequest(2048, 2048, 1, 1);  // 4M-element result > max_elements
  s = Call(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--max_elements")) << s.error_message();

  // A message over --max_message_bytes is refused by gRPC itself before it is parsed.
  r = RandomRequest(1024, 1, 1024, 1);  // 4 MiB A ...
  r.mutable_b()->clear_shape();
  r.mutable_b()->add_shape(1024);
  r.mutable_b()->add_shape(1024);
  r.mutable_b()->mutable_data()->resize(4 << 20);  // ... + 4 MiB B > 8 MiB
  s = Call(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  // Still serving.
  ASSERT_TRUE(Call(RandomRequest(8, 8, 8, 2), &response).ok());
}

TEST_F(ServerTest, MalformedInputsNeverCrashTheServer) {
  Start();
  std::vector<gemm::v1::MatmulRequest> bad;
  bad.emplace_back();  // empty
  gemm::v1::MatmulRequest r = RandomRequest(4, 4, 4, 1);
  r.mutable_a()->set_shape(0, -1);
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.mutable_a()->set_shape(0, int64_t{1} << 62);
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.mutable_b()->set_dtype(static_cast<gemm::v1::DataType>(-5));
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.mutable_b()->clear_data();
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.mutable_a()->add_shape(4);
  r.mutable_a()->add_shape(4);
  bad.push_back(r);
  r = RandomRequest(4, 5, 6, 1);
  r.set_transpose_a(true);
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.set_beta(std::nanf(""));
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.set_beta(1);
  bad.push_back(r);
  r = RandomRequest(4, 4, 4, 1);
  r.set_output_dtype(gemm::v1::DATA_TYPE_INT8);
  bad.push_back(r);
  for (size_t i = 0; i < bad.size(); ++i) {
    gemm::v1::MatmulResponse response;
    const grpc::Status s = Call(bad[i], &response);
    EXPECT_FALSE(s.ok()) << "case " << i;
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << "case " << i << ": " << s.error_code() << " " << s.error_message();
  }

  // Bytes that are not a MatmulRequest at all.
  grpc::GenericStub generic(channel_);
  for (const std::string& garbage : {std::string("\xff\xff\xff\xff\x0f", 5),
                                     std::string(1000, '\x0a'), std::string("\x1a\x80")}) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer reply;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, "/gemm.v1.GemmService/Matmul", grpc::StubOptions(), &request,
                      &reply, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_FALSE(status.ok());
  }

  gemm::v1::MatmulResponse response;
  EXPECT_TRUE(Call(RandomRequest(32, 32, 32, 9), &response).ok());
  EXPECT_EQ(HealthStatus(), "SERVING");
}

TEST_F(ServerTest, Large4096Fp32RequestSucceeds) {
  Start();
  constexpr int64_t kN = 4096;
  gemm::v1::MatmulRequest request = RandomRequest(kN, kN, kN, 11);
  ASSERT_EQ(request.a().data().size(), 64u << 20);  // 64 MiB per operand
  gemm::v1::MatmulResponse response;
  const grpc::Status s = Call(request, &response, absl::Seconds(240));
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_EQ(response.c().data().size(), 64u << 20);
  GemmProblem p;
  p.m = p.n = p.k = kN;
  const GemmOperands ops{request.a().data().data(), request.b().data().data(), nullptr, nullptr};
  // FP64 reference on sampled rows (first, last, and a few between).
  for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{2047}, kN - 1}) {
    std::vector<double> ref(kN);
    ReferenceGemmRows(p, ops, 0, row, row + 1, ref.data());
    const char* c_row = response.c().data().data() + row * kN * 4;
    EXPECT_LE(RelativeError(ref.data(), c_row, DataType::kFloat32, kN), 1e-5) << "row " << row;
  }
}

TEST_F(ServerTest, MetricsEndpointServesTheMetrics) {
  ServerConfig config = TestConfig();
  config.metrics_port = 0;
  Start(config);
  gemm::v1::MatmulResponse response;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Call(RandomRequest(64, 32, 16, i), &response).ok());
  gemm::v1::MatmulRequest bad = RandomRequest(4, 4, 4, 1);
  bad.mutable_a()->clear_data();
  EXPECT_FALSE(Call(bad, &response).ok());

  ASSERT_GT(server_->metrics_port(), 0);
  ASSERT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(10)));  // every call counted
  const std::string page = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(absl::StartsWith(page, "HTTP/1.")) << page.substr(0, 200);
  for (const char* name : {"gemm_requests_total", "gemm_request_duration_seconds",
                           "gemm_batch_size", "gemm_queue_depth", "gemm_inflight_requests",
                           "gemm_flops_total", "gemm_bytes_received_total", "gemm_bytes_sent_total",
                           "gemm_device_busy_seconds_total", "gemm_device_healthy"}) {
    EXPECT_TRUE(absl::StrContains(page, absl::StrCat("# TYPE ", name, " "))) << name;
  }
  EXPECT_EQ(
      ScrapedValue(page, "gemm_requests_total{code=\"OK\",method=\"Matmul\",precision=\"FP32\"}"),
      3);
  EXPECT_EQ(
      ScrapedValue(
          page,
          "gemm_requests_total{code=\"INVALID_ARGUMENT\",method=\"Matmul\",precision=\"NONE\"}"),
      1);
  EXPECT_EQ(ScrapedValue(page, "gemm_flops_total{device=\"0\",precision=\"FP32\"}"),
            3 * 2.0 * 64 * 32 * 16);
  EXPECT_EQ(ScrapedValue(page, "gemm_bytes_received_total"), 3 * (64 * 16 + 16 * 32) * 4.0);
  EXPECT_EQ(ScrapedValue(page, "gemm_bytes_sent_total"), 3 * 64 * 32 * 4.0);
  EXPECT_EQ(ScrapedValue(page, "gemm_batch_size_count"), 3);
  EXPECT_EQ(ScrapedValue(page, "gemm_inflight_requests"), 0);
  EXPECT_EQ(ScrapedValue(page, "gemm_device_healthy{device=\"0\"}"), 1);
  EXPECT_EQ(ScrapedValue(
                page, "gemm_request_duration_seconds_count{method=\"Matmul\",phase=\"compute\"}"),
            3);
  EXPECT_EQ(
      ScrapedValue(page, "gemm_request_duration_seconds_count{method=\"Matmul\",phase=\"total\"}"),
      4);
}

TEST_F(ServerTest, DeadlineAndCancellationDropJobsBeforeTheDevice) {
  auto device = std::make_unique<FakeDevice>(/*gated=*/true);
  FakeDevice* fake = device.get();
  ServerConfig config = TestConfig();
  config.metrics_port = 0;
  Start(config, std::move(device));

  AsyncCall running, late, cancelled;
  running.request = RandomRequest(3, 2, 2, 1);
  running.Start(stub_.get());
  fake->AwaitStarted(1);  // the device is busy with `running`

  late.request = RandomRequest(5, 2, 2, 1);
  late.context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
  late.Start(stub_.get());
  cancelled.request = RandomRequest(7, 2, 2, 1);
  cancelled.Start(stub_.get());
  late.done.WaitForNotification();
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  cancelled.context.TryCancel();
  cancelled.done.WaitForNotification();
  EXPECT_EQ(cancelled.status.error_code(), grpc::StatusCode::CANCELLED);
  // Both calls are over for gRPC (a passed deadline cancels the server-side call too), but
  // that news reaches the server asynchronously (RST_STREAM); wait until it has.
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (server_->executor().CancelledJobsWaiting() < 2 && absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(server_->executor().CancelledJobsWaiting(), 2u);

  fake->Open();
  running.done.WaitForNotification();
  EXPECT_TRUE(running.status.ok());
  server_->Shutdown();  // drains: both dropped jobs have been answered by now
  EXPECT_EQ(fake->ran_m(), std::vector<int64_t>{3});  // neither reached the device
  // Both were answered without running. Which code the late one gets is gRPC's timing: the
  // server's deadline (its arrival + the client's remaining timeout) can still lie ahead
  // when the client's RST_STREAM has already cancelled it, and then it counts as
  // CANCELLED. The executor's own choice between the two is tested in
  // BatcherTest.ExpiredAndCancelledJobsNeverReachTheDevice.
  const std::string page = HttpGet(server_->metrics_port(), "/metrics");
  const double deadline_exceeded =
      std::max(0.0, ScrapedValue(page,
                                 "gemm_requests_total{code=\"DEADLINE_EXCEEDED\",method=\"Matmul\","
                                 "precision=\"FP32\"}"));
  const double cancelled_count = ScrapedValue(
      page, "gemm_requests_total{code=\"CANCELLED\",method=\"Matmul\",precision=\"FP32\"}");
  EXPECT_GE(cancelled_count, 1);
  EXPECT_EQ(deadline_exceeded + cancelled_count, 2);
  EXPECT_EQ(
      ScrapedValue(page, "gemm_requests_total{code=\"OK\",method=\"Matmul\",precision=\"FP32\"}"),
      1);
  EXPECT_EQ(server_->metrics().inflight(), 0);
}

TEST_F(ServerTest, FullQueueAndDeviceFaultCodes) {
  auto device = std::make_unique<FakeDevice>(/*gated=*/true);
  FakeDevice* fake = device.get();
  ServerConfig config = TestConfig();
  config.max_queue_size = 1;
  Start(config, std::move(device));

  AsyncCall running, queued;
  running.request = RandomRequest(3, 2, 2, 1);
  running.Start(stub_.get());
  fake->AwaitStarted(1);
  queued.request = RandomRequest(4, 2, 2, 1);
  queued.Start(stub_.get());
  while (server_->executor().QueueDepth() < 1) absl::SleepFor(absl::Milliseconds(1));

  gemm::v1::MatmulResponse response;
  const grpc::Status full = Call(RandomRequest(5, 2, 2, 1), &response);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(full.error_message(), "queue full: 1 jobs waiting (--max_queue_size=1); retry later");

  fake->FailWith(absl::InternalError("CUDA error: injected fault"));
  fake->Open();
  for (AsyncCall* call : {&running, &queued}) {
    call->done.WaitForNotification();
    EXPECT_EQ(call->status.error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_EQ(call->status.error_message(), "CUDA error: injected fault");
    EXPECT_FALSE(call->response.has_c());
  }
}

TEST_F(ServerTest, ShutdownCompletesEveryAcceptedRequest) {
  auto device = std::make_unique<FakeDevice>(/*gated=*/true);
  FakeDevice* fake = device.get();
  Start(TestConfig(), std::move(device));
  ASSERT_EQ(HealthStatus(), "SERVING");

  constexpr int kCalls = 4;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<AsyncCall>());
    calls.back()->request = RandomRequest(10 + i, 3, 2, i);
    calls.back()->Start(stub_.get());
  }
  fake->AwaitStarted(1);
  while (server_->metrics().inflight() < kCalls) absl::SleepFor(absl::Milliseconds(1));

  std::thread shutdown([&] { server_->Shutdown(); });
  // Once health stops saying SERVING, no new request is accepted.
  while (HealthStatus() == "SERVING") absl::SleepFor(absl::Milliseconds(1));
  gemm::v1::MatmulResponse refused;
  EXPECT_EQ(Call(RandomRequest(2, 2, 2, 1), &refused).error_code(), grpc::StatusCode::UNAVAILABLE);

  fake->Open();
  shutdown.join();
  for (int i = 0; i < kCalls; ++i) {
    calls[i]->done.WaitForNotification();
    ASSERT_TRUE(calls[i]->status.ok()) << i << ": " << calls[i]->status.error_message();
    const float* c = reinterpret_cast<const float*>(calls[i]->response.c().data().data());
    EXPECT_EQ(c[0], static_cast<float>(10 + i));  // each caller got its own result
  }
  EXPECT_EQ(fake->ran_m().size(), static_cast<size_t>(kCalls));
}

}  // namespace
}  // namespace gemmd
