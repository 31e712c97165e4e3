// QuantizedMatmul end to end on the CPU backend (in-process server on 127.0.0.1:0):
// both formats, weight-only, checked against the FP64 product of the dequantized
// operands (the format's loss is not the service's), and malformed requests.
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/metric_family.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/cpu_quantized_gemm.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "proto/proto_types.h"
#include "proto/quantized_tensor.h"
#include "server/gemm_server.h"
#include "server/observability/log.h"
#include "server/observability/metrics.h"
#include "tests/test_util.h"

namespace gemmd {
namespace {

std::vector<float> Gaussian(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::string bytes = testing::RandomBytes(DataType::kFloat32, count, rng);
  std::vector<float> out(static_cast<size_t>(count));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// A quantized operand and its dequantized values (what the reference multiplies).
struct Operand {
  gemm::v1::QuantizedTensor proto;
  std::vector<float> dequantized;
};

Operand Quantized(QuantFormat format, int64_t rows, int64_t k, uint64_t seed) {
  const std::vector<float> x = Gaussian(rows * k, seed);
  Operand op;
  op.dequantized.resize(x.size());
  if (format == QuantFormat::kInt8) {
    const Int8Matrix m = *QuantizeInt8(x.data(), rows, k);
    DequantizeInt8(m, op.dequantized.data());
    op.proto = ToProto(m);
  } else {
    const Nvfp4Matrix m = *QuantizeNvfp4(x.data(), rows, k);
    EXPECT_TRUE(DequantizeNvfp4(m, op.dequantized.data()).ok());
    op.proto = ToProto(m);
  }
  return op;
}

// ||C - A B^T||_F / ||A B^T||_F with A [m,k], B [n,k] in FP64.
double ErrorAgainstReference(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                             int64_t n, int64_t k, const std::string& c) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_b = true;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  if (c.size() != static_cast<size_t>(m * n * 4)) return 1e9;
  return RelativeError(ref.data(), c.data(), DataType::kFloat32, m * n);
}

class QuantizedServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogEnabled(false);
    ServerConfig config;
    config.host = "127.0.0.1";
    config.port = 0;
    config.metrics_port = -1;
    config.backend = "cpu";
    absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = gemm::v1::GemmService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Call(const gemm::v1::QuantizedMatmulRequest& request,
                    gemm::v1::MatmulResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    return stub_->QuantizedMatmul(&context, request, response);
  }

  double RequestsCounted(const std::string& precision, const std::string& code) {
    EXPECT_TRUE(server_->AwaitIdle(absl::Now() + absl::Seconds(10)));
    for (const prometheus::MetricFamily& family : server_->metrics().registry()->Collect()) {
      if (family.name != "gemm_requests_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : metric.label) labels[l.name] = l.value;
        if (labels["method"] == "QuantizedMatmul" && labels["precision"] == precision &&
            labels["code"] == code) {
          return metric.counter.value;
        }
      }
    }
    return 0;
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<gemm::v1::GemmService::Stub> stub_;
};

TEST_F(QuantizedServerTest, BothFormatsMatchTheDequantizedReference) {
  constexpr int64_t m = 24, n = 40, k = 96;
  for (QuantFormat format : {QuantFormat::kInt8, QuantFormat::kNvfp4}) {
    SCOPED_TRACE(QuantFormatName(format));
    const Operand a = Quantized(format, m, k, 1);
    const Operand b = Quantized(format, n, k, 2);
    gemm::v1::QuantizedMatmulRequest request;
    *request.mutable_a() = a.proto;
    *request.mutable_b() = b.proto;
    gemm::v1::MatmulResponse response;
    const grpc::Status status = Call(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.c().shape_size(), 2);
    EXPECT_EQ(response.c().shape(0), m);
    EXPECT_EQ(response.c().shape(1), n);
    EXPECT_EQ(response.c().dtype(), gemm::v1::DATA_TYPE_FLOAT32);
    // FP32 accumulation of exact dequantized values: FP32-path tolerance.
    EXPECT_LE(ErrorAgainstReference(a.dequantized, b.dequantized, m, n, k, response.c().data()),
              1e-5);
    EXPECT_FALSE(response.kernel().empty());
  }
  // Counted as gRPC reports each call done, which may trail the client's answer.
  const absl::Time limit = absl::Now() + absl::Seconds(20);
  while ((RequestsCounted("INT8", "OK") != 1 || RequestsCounted("NVFP4", "OK") != 1) &&
         absl::Now() < limit) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(RequestsCounted("INT8", "OK"), 1);
  EXPECT_EQ(RequestsCounted("NVFP4", "OK"), 1);
}

// Weight-only requests run from the packed weight (cpu_weight_only_sgemm_openblas): B
// is dequantized a tile of rows at a time straight into OpenBLAS. 300 x 4096 takes two
// tiles (256 rows, then 44), so C's columns are written in two calls.
TEST_F(QuantizedServerTest, WeightOnlyQuantization) {
  struct Case {
    QuantFormat format;
    DataType a_type;
    int64_t m, n, k;
  };
  for (const Case& c : {Case{QuantFormat::kNvfp4, DataType::kFloat32, 3, 64, 128},
                        Case{QuantFormat::kNvfp4, DataType::kFloat16, 3, 64, 128},
                        Case{QuantFormat::kInt8, DataType::kBFloat16, 5, 33, 96},
                        Case{QuantFormat::kNvfp4, DataType::kFloat16, 2, 300, 4096},
                        Case{QuantFormat::kInt8, DataType::kFloat32, 1, 300, 4096}}) {
    SCOPED_TRACE(absl::StrCat(QuantFormatName(c.format), " ", DataTypeName(c.a_type), " ", c.m,
                              "x", c.n, "x", c.k));
    const Operand b = Quantized(c.format, c.n, c.k, 3);
    std::mt19937_64 rng(4);
    gemm::v1::QuantizedMatmulRequest request;
    gemm::v1::Tensor* a = request.mutable_a_dense();
    a->add_shape(c.m);
    a->add_shape(c.k);
    a->set_dtype(DataTypeToProto(c.a_type));
    a->set_data(testing::RandomBytes(c.a_type, c.m * c.k, rng));
    std::vector<float> a_values(c.m * c.k);
    for (int64_t i = 0; i < c.m * c.k; ++i) {
      a_values[i] = static_cast<float>(LoadAsDouble(a->data().data(), c.a_type, i));
    }
    *request.mutable_b() = b.proto;
    gemm::v1::MatmulResponse response;
    const grpc::Status status = Call(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(ErrorAgainstReference(a_values, b.dequantized, c.m, c.n, c.k, response.c().data()),
              1e-5);
    EXPECT_EQ(response.kernel(), kCpuWeightOnlyKernel);  // not the host dequantization
  }
}

// The CPU backend lists its one quantized kernel. A request that forces a GPU quantized
// kernel gets FAILED_PRECONDITION, not a wrong path; forcing the weight-only kernel on a
// quantized A says why it cannot; both operands quantized go the host dequantization way.
TEST_F(QuantizedServerTest, TheCpuBackendListsItsWeightOnlyKernel) {
  {
    grpc::ClientContext context;
    gemm::v1::ServerInfo info;
    ASSERT_TRUE(stub_->GetServerInfo(&context, {}, &info).ok());
    ASSERT_EQ(info.quantized_kernels_size(), 1);
    EXPECT_EQ(info.quantized_kernels(0), kCpuWeightOnlyKernel);
  }
  const Operand a = Quantized(QuantFormat::kNvfp4, 2, 32, 10);
  const Operand b = Quantized(QuantFormat::kNvfp4, 8, 32, 9);
  gemm::v1::QuantizedMatmulRequest request;
  *request.mutable_a() = a.proto;
  *request.mutable_b() = b.proto;
  {
    request.set_kernel("skinny_nvfp4_mma16816");
    gemm::v1::MatmulResponse response;
    const grpc::Status status = Call(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    // Both lists, the quantized kernels included. (Before: the dense ones only.)
    EXPECT_EQ(status.error_message(),
              "no kernel named 'skinny_nvfp4_mma16816' on this server; Matmul kernels: "
              "cpu_sgemm_openblas, cpu_hgemm_emulated_openblas, cpu_dgemm_openblas; "
              "QuantizedMatmul kernels: "
              "cpu_weight_only_sgemm_openblas");
  }
  {
    request.set_kernel(kCpuWeightOnlyKernel);
    gemm::v1::MatmulResponse response;
    const grpc::Status status = Call(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(),
              "kernel cpu_weight_only_sgemm_openblas takes a dense A (weight-only "
              "quantization); a is NVFP4");
  }
  {
    request.clear_kernel();
    gemm::v1::MatmulResponse response;
    const grpc::Status status = Call(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.kernel(), kCpuSgemmKernel);
    EXPECT_LE(ErrorAgainstReference(a.dequantized, b.dequantized, 2, 8, 32, response.c().data()),
              1e-5);
  }
}

TEST_F(QuantizedServerTest, MalformedRequestsAreInvalidArguments) {
  const Operand a = Quantized(QuantFormat::kInt8, 4, 32, 5);
  const Operand b = Quantized(QuantFormat::kNvfp4, 8, 32, 6);
  auto expect_invalid = [&](gemm::v1::QuantizedMatmulRequest request, const std::string& message) {
    gemm::v1::MatmulResponse response;
    const grpc::Status status = Call(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << message;
    EXPECT_EQ(status.error_message(), message);
    EXPECT_FALSE(response.has_c());
  };
  gemm::v1::QuantizedMatmulRequest good;
  *good.mutable_a() = a.proto;
  *good.mutable_b() = b.proto;

  gemm::v1::QuantizedMatmulRequest r = good;
  r.mutable_b()->mutable_scales()->pop_back();
  expect_invalid(r, "b.scales has 15 bytes; NVFP4 [8,32] needs 16 (one E4M3 byte per 16 values)");
  r = good;
  r.mutable_a()->mutable_scales()->append("x");
  expect_invalid(r, "a.scales has 17 bytes; INT8 [4,32] needs 16 (one float32 per row)");
  r = good;
  r.mutable_b()->mutable_data()->resize(100);
  expect_invalid(r, "b.data has 100 bytes; NVFP4 [8,32] needs 128");
  r = good;
  r.mutable_b()->set_shape(1, 24);
  expect_invalid(r,
                 "b: NVFP4 needs K to be a multiple of 16 (one scale per 16 values); K is 24: "
                 "pad K with zeros to 32");
  r = good;
  (*r.mutable_b()->mutable_scales())[3] = static_cast<char>(0x7F);
  expect_invalid(r,
                 "b: NVFP4 block scale [1, 1] is 0x7f, a NaN in E4M3 (0x7F and 0xFF are not "
                 "scales)");
  r = good;
  (*r.mutable_b()->mutable_scales())[3] = static_cast<char>(0x90);
  expect_invalid(r,
                 "b: NVFP4 block scale [1, 1] is 0x90, which has the sign bit set; block "
                 "scales are unsigned (0x00-0x7E)");
  r = good;
  const float negative = -0.25f;
  std::memcpy(r.mutable_a()->mutable_scales()->data() + 4, &negative, 4);
  expect_invalid(r, "a.scales[1] is -0.25; INT8 scales must be finite and >= 0");
  r = good;
  r.mutable_b()->set_tensor_scale(0);
  expect_invalid(r, "b.tensor_scale is 0; NVFP4 needs a finite scale > 0");
  r = good;
  r.mutable_b()->set_format(gemm::v1::QUANT_FORMAT_UNSPECIFIED);
  expect_invalid(r, "b.format is unset; expected INT8 or NVFP4");
  r = good;
  r.clear_a();
  expect_invalid(r, "a is missing: set a (quantized), a_dense (FLOAT32/FLOAT16/BFLOAT16) or a_ref");
  r = good;
  *r.mutable_a() = Quantized(QuantFormat::kInt8, 4, 48, 7).proto;
  expect_invalid(r,
                 "K mismatch: A is [4, 48] and B is [8, 32]; both are K-major, so K must agree");
  r = good;
  r.mutable_a()->add_shape(2);
  expect_invalid(r, "a.shape [4,32,2] has rank 3; expected [rows, K]");
  EXPECT_GE(RequestsCounted("NONE", "INVALID_ARGUMENT"), 10);

  gemm::v1::MatmulResponse response;
  EXPECT_TRUE(Call(good, &response).ok());  // the server is still fine
}

// Admission is checked before the server allocates the dequantized copies.
TEST(QuantizedAdmissionTest, OverTheInflightCapIsRefusedBeforeAllocating) {
  SetLogEnabled(false);
  ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  config.metrics_port = -1;
  config.backend = "cpu";
  config.max_inflight_bytes = 1000;
  absl::StatusOr<std::unique_ptr<GemmServer>> server = GemmServer::Create(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = gemm::v1::GemmService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  gemm::v1::QuantizedMatmulRequest request;
  *request.mutable_a() = Quantized(QuantFormat::kInt8, 4, 32, 8).proto;
  *request.mutable_b() = Quantized(QuantFormat::kNvfp4, 8, 32, 9).proto;
  grpc::ClientContext context;
  gemm::v1::MatmulResponse response;
  const grpc::Status status = stub->QuantizedMatmul(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // The request's payloads are held (321 bytes received; in place or copied into a
  // buffer with 64-byte-aligned payloads, 336 bytes, as the slices fall); dequantizing
  // needs FP32 A [4,32] and B [8,32] on top: (128 + 256) * 4 bytes.
  EXPECT_THAT(status.error_message(),
              ::testing::MatchesRegex("server busy: requests hold [0-9]+ bytes, this one "
                                    "needs 1536 more \\(--max_inflight_bytes=1000\\); retry later"));
}

}  // namespace
}  // namespace gemmd
