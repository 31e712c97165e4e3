// The whole server on the CUDA backend, over gRPC (in-process server on 127.0.0.1:0):
// concurrent mixed requests, batched onto the GPU kernels, each checked against FP64.
// Skips where there is no GPU. Tolerances (relative Frobenius error): FP32 1e-5 (K <= 512,
// FP32 accumulation); FP16_TENSOR 2e-3 (inputs rounded to FP16, FP32 accumulation).
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "server/batcher.h"
#include "server/cuda/cuda_device_pool.h"
#include "server/gemm_server.h"
#include "server/log.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

using ::gemmd::testing::RandomBytes;

struct Shape {
  int64_t batch, m, n, k;
  bool transpose_a, transpose_b;
  DataType type;
  gemm::v1::Precision precision;
};

gemm::v1::MatmulRequest MakeRequest(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  gemm::v1::MatmulRequest r;
  auto set = [&](gemm::v1::Tensor* t, int64_t rows, int64_t cols) {
    if (s.batch > 1) t->add_shape(s.batch);
    t->add_shape(rows);
    t->add_shape(cols);
    t->set_dtype(DataTypeToProto(s.type));
    t->set_data(RandomBytes(s.type, s.batch * rows * cols, rng));
  };
  set(r.mutable_a(), s.transpose_a ? s.k : s.m, s.transpose_a ? s.m : s.k);
  set(r.mutable_b(), s.transpose_b ? s.n : s.k, s.transpose_b ? s.k : s.n);
  r.set_transpose_a(s.transpose_a);
  r.set_transpose_b(s.transpose_b);
  r.set_precision(s.precision);
  return r;
}

double ErrorOf(const Shape& s, const gemm::v1::MatmulRequest& request,
               const gemm::v1::MatmulResponse& response) {
  GemmProblem p;
  p.batch = s.batch;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.transpose_a = s.transpose_a;
  p.transpose_b = s.transpose_b;
  p.a_type = p.b_type = s.type;
  const std::vector<double> ref = ReferenceGemm(
      p, {request.a().data().data(), request.b().data().data(), nullptr, nullptr});
  if (response.c().data().size() != ref.size() * sizeof(float)) return 1e9;
  return RelativeError(ref.data(), response.c().data().data(), DataType::kFloat32,
                       static_cast<int64_t>(ref.size()));
}

class GpuServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here: GPU test skipped";
    SetLogEnabled(false);
  }

  void Start(ServerConfig config) {
    config.host = "127.0.0.1";
    config.port = 0;
    config.metrics_port = -1;
    config.backend = "cuda";
    absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = gemm::v1::GemmService::NewStub(channel_);
  }

  grpc::Status Call(const gemm::v1::MatmulRequest& request, gemm::v1::MatmulResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return stub_->Matmul(&context, request, response);
  }

  std::unique_ptr<GemmServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gemm::v1::GemmService::Stub> stub_;
};

TEST_F(GpuServerTest, ConcurrentMixedRequestsAreBatchedAndCorrect) {
  ServerConfig config;
  config.max_batch_size = 16;
  config.max_queue_delay = absl::Microseconds(500);
  Start(config);
  const std::vector<Shape> shapes = {
      {1, 64, 48, 32, false, false, DataType::kFloat32, gemm::v1::PRECISION_FP32},
      {1, 64, 48, 32, false, false, DataType::kFloat16, gemm::v1::PRECISION_FP16_TENSOR},
      {3, 33, 17, 65, true, false, DataType::kFloat32, gemm::v1::PRECISION_FP32},
      {1, 128, 128, 128, false, true, DataType::kFloat32, gemm::v1::PRECISION_FP16_TENSOR},
      {2, 100, 70, 512, false, false, DataType::kBFloat16, gemm::v1::PRECISION_FP16_TENSOR},
      {1, 1, 257, 300, false, false, DataType::kFloat16, gemm::v1::PRECISION_FP32},
  };
  constexpr int kThreads = 12, kCallsPerThread = 24;
  std::vector<std::string> failures(kThreads);
  std::vector<uint32_t> largest_batch(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 pick(t);
      for (int i = 0; i < kCallsPerThread && failures[t].empty(); ++i) {
        const Shape& s = shapes[pick() % shapes.size()];
        const gemm::v1::MatmulRequest request = MakeRequest(s, 1000 * t + i);
        gemm::v1::MatmulResponse response;
        const grpc::Status status = Call(request, &response);
        if (!status.ok()) {
          failures[t] = status.error_message();
          break;
        }
        const double tolerance = s.precision == gemm::v1::PRECISION_FP32 ? 1e-5 : 2e-3;
        const double error = ErrorOf(s, request, response);
        if (!(error <= tolerance)) {
          failures[t] = absl::StrCat("call ", i, " shape m=", s.m, ": rel error ", error,
                                     " > ", tolerance, " (kernel ", response.kernel(), ")");
        }
        if (!absl::StartsWith(response.device(), "cuda:")) {
          failures[t] = "device " + response.device();
        }
        largest_batch[t] = std::max(largest_batch[t], response.timing().batch_size());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  uint32_t largest = 0;
  for (uint32_t b : largest_batch) largest = std::max(largest, b);
  EXPECT_GE(largest, 2u) << "12 concurrent callers never shared a launch";
  EXPECT_EQ(server_->executor().InflightBytes(), 0);
}

TEST_F(GpuServerTest, ResponsesReportPhasesAndTheServerDescribesItsGpus) {
  ServerConfig config;
  Start(config);
  const Shape s{1, 512, 512, 512, false, false, DataType::kFloat16,
                gemm::v1::PRECISION_FP16_TENSOR};
  const gemm::v1::MatmulRequest request = MakeRequest(s, 7);
  gemm::v1::MatmulResponse response;
  ASSERT_TRUE(Call(request, &response).ok());
  EXPECT_LE(ErrorOf(s, request, response), 2e-3);
  EXPECT_TRUE(absl::StartsWith(response.kernel(), "hgemm_wmma")) << response.kernel();
  EXPECT_EQ(response.precision(), gemm::v1::PRECISION_FP16_TENSOR);
  EXPECT_GT(response.timing().copy_in_us() + response.timing().compute_us() +
                response.timing().copy_out_us(),
            0);
  EXPECT_GE(response.timing().total_us(), response.timing().compute_us());
  EXPECT_EQ(response.timing().batch_size(), 1u);

  grpc::ClientContext context;
  gemm::v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.backend(), "cuda");
  ASSERT_EQ(info.devices_size(), CudaDeviceCount());
  for (const gemm::v1::DeviceInfo& d : info.devices()) {
    EXPECT_EQ(d.kind(), "cuda");
    EXPECT_TRUE(d.healthy());
    EXPECT_GT(d.memory_bytes(), 0);
    EXPECT_FALSE(d.compute_capability().empty());
  }
  EXPECT_GE(info.kernels_size(), 7);
  EXPECT_EQ(info.limits().max_batch_size(), 64u);

  // FP16 output: FP32 results rounded on the GPU, half the bytes back.
  gemm::v1::MatmulRequest half_out = request;
  half_out.set_output_dtype(gemm::v1::DATA_TYPE_FLOAT16);
  ASSERT_TRUE(Call(half_out, &response).ok());
  ASSERT_EQ(response.c().dtype(), gemm::v1::DATA_TYPE_FLOAT16);
  ASSERT_EQ(response.c().data().size(), size_t{512 * 512 * 2});
  GemmProblem p;
  p.m = p.n = p.k = 512;
  p.a_type = p.b_type = DataType::kFloat16;
  const std::vector<double> ref = ReferenceGemm(
      p, {request.a().data().data(), request.b().data().data(), nullptr, nullptr});
  EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat16, 512 * 512),
            3e-3);
}

}  // namespace
}  // namespace gemmd
