// The whole server on the CUDA backend, over gRPC (in-process server on 127.0.0.1:0):
// concurrent mixed requests, batched onto the GPU kernels, each checked against FP64.
// Skips where there is no GPU. Tolerances (relative Frobenius error): FP32 1e-5 (K <= 512,
// FP32 accumulation); FP16_TENSOR 2e-3 (inputs rounded to FP16, FP32 accumulation).
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "client/shared_memory.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "proto/quantized_tensor.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "server/gemm_server.h"
#include "server/observability/log.h"
#include "server/scheduling/batcher.h"
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
  config.wait_when_idle = true;  // the batch window as a fixed delay: batches must form
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
  // An FP16 tensor-core kernel: WMMA, or on compute capability 9.0 a wgmma one.
  EXPECT_TRUE(absl::StartsWith(response.kernel(), "hgemm_w")) << response.kernel();
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

// QuantizedMatmul on the GPU: packed operands go to the quantized kernels (skinny for
// few rows, square tensor-core kernels otherwise), checked against FP64 on the
// dequantized operands (1e-5; FP16 A: 1e-5 at these K). A BF16 A and INT8 B with many
// rows take the host-dequantize path and still answer correctly.
struct QuantCase {
  const char* name;
  int64_t m, n, k;
  bool a_quantized;
  QuantFormat format;
  DataType a_dense_type;
  const char* kernel_prefix;  // what response.kernel() starts with
};

TEST_F(GpuServerTest, QuantizedMatmulRunsOnTheQuantizedKernels) {
  Start(ServerConfig{});
  // From 256 rows, where it runs, the swap-AB wgmma kernel on a copy of the weight the
  // launch packs into its workspace.
  const bool wgmma = gpu::ResolveSwapAbPath(gpu::SwapAbPath::kWgmma).ok();
  const QuantCase cases[] = {
      {"fp16 x nvfp4 M=300 (weight packed for swap-AB)", 300, 272, 512, false, QuantFormat::kNvfp4,
       DataType::kFloat16, wgmma ? "swapab_nvfp4_wgmma" : "qgemm_f16xnvfp4"},
      {"fp16 x int8 M=256 (weight packed for swap-AB)", 256, 144, 320, false, QuantFormat::kInt8,
       DataType::kFloat16, wgmma ? "swapab_int8_wgmma" : "sgemm"},
      {"nvfp4 both M=256 (weight packed for swap-AB)", 256, 512, 256, true, QuantFormat::kNvfp4,
       DataType::kFloat32, wgmma ? "swapab_nvfp4xnvfp4_wgmma" : "qgemm_nvfp4"},
      {"nvfp4 weight-only M=1", 1, 1000, 1024, false, QuantFormat::kNvfp4, DataType::kFloat16,
       "skinny_nvfp4_ring_mma16816"},
      {"int8 weight-only FP32 M=16", 16, 777, 512, false, QuantFormat::kInt8, DataType::kFloat32,
       "skinny_int8_regs_mma16816"},
      {"nvfp4 both M=5 K%32!=0", 5, 300, 48, true, QuantFormat::kNvfp4, DataType::kFloat32,
       "skinny_nvfp4_regs_mma16816"},
      {"nvfp4 both M=300", 300, 260, 512, true, QuantFormat::kNvfp4, DataType::kFloat32,
       "qgemm_nvfp4"},
      {"int8 both M=200", 200, 130, 256, true, QuantFormat::kInt8, DataType::kFloat32,
       "qgemm_int8"},
      {"fp16 x nvfp4 M=129", 129, 256, 256, false, QuantFormat::kNvfp4, DataType::kFloat16,
       "qgemm_f16xnvfp4"},
      {"bf16 x int8 M=3", 3, 200, 256, false, QuantFormat::kInt8, DataType::kBFloat16,
       "skinny_int8_regs_mma16816"},
      {"nvfp4 weight-only M=12 (streaming path on a GPU it fills)", 12, 8448, 1024, false,
       QuantFormat::kNvfp4, DataType::kFloat16, "skinny_nvfp4_stream_mma16816"},
      {"nvfp4 weight-only M=48 (streaming path, not the square kernel)", 48, 8448, 1024, false,
       QuantFormat::kNvfp4, DataType::kFloat16, "skinny_nvfp4_stream_mma16816"},
      {"int8 weight-only M=40 (streaming path)", 40, 8448, 1040, false, QuantFormat::kInt8,
       DataType::kFloat16, "skinny_int8_stream_mma16816"},
      {"bf16 x nvfp4 M=24 (streaming path)", 24, 8448, 1024, false, QuantFormat::kNvfp4,
       DataType::kBFloat16, "skinny_nvfp4_stream_mma16816"},
      {"bf16 x nvfp4 M=70 (host)", 70, 64, 64, false, QuantFormat::kNvfp4, DataType::kBFloat16,
       "sgemm"},
  };
  uint64_t seed = 100;
  for (const QuantCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::mt19937_64 rng(++seed);
    auto quantize = [&](int64_t rows, std::vector<float>* deq) {
      const std::string bytes = RandomBytes(DataType::kFloat32, rows * c.k, rng);
      const float* x = reinterpret_cast<const float*>(bytes.data());
      deq->resize(static_cast<size_t>(rows * c.k));
      if (c.format == QuantFormat::kInt8) {
        const Int8Matrix q = *QuantizeInt8(x, rows, c.k);
        DequantizeInt8(q, deq->data());
        return ToProto(q);
      }
      const Nvfp4Matrix q = *QuantizeNvfp4(x, rows, c.k);
      EXPECT_TRUE(DequantizeNvfp4(q, deq->data()).ok());
      return ToProto(q);
    };
    gemm::v1::QuantizedMatmulRequest request;
    std::vector<float> a, b;
    if (c.a_quantized) {
      *request.mutable_a() = quantize(c.m, &a);
    } else {
      gemm::v1::Tensor* t = request.mutable_a_dense();
      t->add_shape(c.m);
      t->add_shape(c.k);
      t->set_dtype(DataTypeToProto(c.a_dense_type));
      t->set_data(RandomBytes(c.a_dense_type, c.m * c.k, rng));
      a.resize(static_cast<size_t>(c.m * c.k));
      for (int64_t i = 0; i < c.m * c.k; ++i) {
        a[i] = static_cast<float>(LoadAsDouble(t->data().data(), c.a_dense_type, i));
      }
    }
    *request.mutable_b() = quantize(c.n, &b);
    gemm::v1::MatmulResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->QuantizedMatmul(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(absl::StartsWith(response.kernel(), c.kernel_prefix)) << response.kernel();
    GemmProblem p;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.transpose_b = true;
    const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
    ASSERT_EQ(response.c().data().size(), ref.size() * sizeof(float));
    EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat32,
                            c.m * c.n),
              1e-5);
  }
  // Kernels by name: listed in GetServerInfo, forced per request (a square kernel's
  // mma.sync variant, a dense kernel = the host path), refused where they cannot run.
  {
    grpc::ClientContext context;
    gemm::v1::ServerInfo info;
    ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
    std::vector<std::string> names(info.quantized_kernels().begin(),
                                   info.quantized_kernels().end());
    for (const char* skinny : {"skinny_nvfp4_ring_mma16816", "skinny_nvfp4_regs_mma16816",
                               "skinny_nvfp4_stream_mma16816"}) {
      EXPECT_NE(std::find(names.begin(), names.end(), skinny), names.end()) << skinny;
    }
    EXPECT_NE(std::find(names.begin(), names.end(), "qgemm_nvfp4_mma_128x128x64_s4"),
              names.end());
    std::mt19937_64 rng(8);
    gemm::v1::QuantizedMatmulRequest request;
    std::vector<float> a(48 * 64), b(80 * 64);
    const std::string xa = RandomBytes(DataType::kFloat32, 48 * 64, rng);
    const std::string xb = RandomBytes(DataType::kFloat32, 80 * 64, rng);
    const Nvfp4Matrix qa = *QuantizeNvfp4(reinterpret_cast<const float*>(xa.data()), 48, 64);
    const Nvfp4Matrix qb = *QuantizeNvfp4(reinterpret_cast<const float*>(xb.data()), 80, 64);
    ASSERT_TRUE(DequantizeNvfp4(qa, a.data()).ok());
    ASSERT_TRUE(DequantizeNvfp4(qb, b.data()).ok());
    *request.mutable_a() = ToProto(qa);
    *request.mutable_b() = ToProto(qb);
    GemmProblem p;
    p.m = 48;
    p.n = 80;
    p.k = 64;
    p.transpose_b = true;
    const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
    for (const char* forced :
         {"qgemm_nvfp4_mma_128x128x64_s4", "skinny_nvfp4_regs_mma16816",
          "sgemm_simt_64x64x8_splitk"}) {
      SCOPED_TRACE(forced);
      request.set_kernel(forced);
      gemm::v1::MatmulResponse response;
      grpc::ClientContext call;
      const grpc::Status status = stub_->QuantizedMatmul(&call, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.kernel(), forced);
      EXPECT_LE(RelativeError(ref.data(), response.c().data().data(), DataType::kFloat32,
                              48 * 80),
                1e-5);
    }
    request.set_kernel("skinny_int8_regs_mma16816");
    gemm::v1::MatmulResponse response;
    grpc::ClientContext call;
    const grpc::Status status = stub_->QuantizedMatmul(&call, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(),
              "kernel skinny_int8_regs_mma16816 decodes INT8 weights; b is NVFP4");
  }

  // A NaN scale byte is refused up front, as on the host path.
  std::mt19937_64 rng(7);
  const std::string bytes = RandomBytes(DataType::kFloat32, 32 * 64, rng);
  gemm::v1::QuantizedMatmulRequest bad;
  *bad.mutable_b() = ToProto(*QuantizeNvfp4(reinterpret_cast<const float*>(bytes.data()), 32, 64));
  (*bad.mutable_b()->mutable_scales())[5] = static_cast<char>(0x7F);
  gemm::v1::Tensor* a = bad.mutable_a_dense();
  a->add_shape(1);
  a->add_shape(64);
  a->set_dtype(gemm::v1::DATA_TYPE_FLOAT32);
  a->set_data(std::string(64 * 4, '\0'));
  gemm::v1::MatmulResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub_->QuantizedMatmul(&context, bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "b: NVFP4 block scale [1, 1] is 0x7f"))
      << status.error_message();
  EXPECT_EQ(server_->executor().InflightBytes(), 0);
}

// Shared-memory regions on the GPU: registered page-locked, and a call with its
// operands and C there (large ones by their own DMA, small ones staged) answers the C
// an inline call does.
TEST_F(GpuServerTest, CallsThroughAPageLockedRegionMatchInlineCalls) {
  Start(ServerConfig());
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region = SharedMemoryRegion::Create(
      absl::StrCat("/gemmd-gputest-", getpid()), 64 << 20, /*replace=*/true);
  ASSERT_TRUE(region.ok()) << region.status();
  absl::StatusOr<gemm::v1::RegionInfo> info =
      RegionClient(channel_).Register("gpu", (*region)->key());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->page_locked());
  GemmClient client(channel_);
  for (const int64_t n : {64, 2048}) {
    SCOPED_TRACE(n);
    std::mt19937_64 rng(static_cast<uint64_t>(n));
    const std::string a = RandomBytes(DataType::kFloat16, n * n, rng);
    const std::string b = RandomBytes(DataType::kFloat16, n * n, rng);
    MatmulArgs args;
    args.a = {{n, n}, gemm::v1::DATA_TYPE_FLOAT16, a};
    args.b = {{n, n}, gemm::v1::DATA_TYPE_FLOAT16, b};
    CallOptions one;
    one.stripes = 1;
    MatmulResult inline_result;
    ASSERT_TRUE(client.Matmul(args, one, &inline_result).ok());
    const int64_t half = static_cast<int64_t>(a.size());
    std::memcpy((*region)->data(), a.data(), a.size());
    std::memcpy((*region)->data() + half, b.data(), b.size());
    args.a.shm = {"gpu", 0, half};
    args.b.shm = {"gpu", half, half};
    args.c_shm = {"gpu", 2 * half, n * n * 4};
    MatmulResult shm_result;
    const absl::Status s = client.Matmul(args, one, &shm_result);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(shm_result.info().kernel(), inline_result.info().kernel());
    std::vector<double> want(static_cast<size_t>(n * n));
    const float* inline_c = reinterpret_cast<const float*>(inline_result.c().data());
    for (size_t i = 0; i < want.size(); ++i) want[i] = inline_c[i];
    EXPECT_LE(RelativeError(want.data(), (*region)->data() + 2 * half, DataType::kFloat32, n * n),
              1e-6);
  }
  EXPECT_TRUE(RegionClient(channel_).Unregister("gpu").ok());
}

}  // namespace
}  // namespace gemmd
