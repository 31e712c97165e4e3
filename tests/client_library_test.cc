// The C++ client library (client/gemm_client.h) against a whole server in-process: the
// results it hands back against the FP64 reference, into the caller's buffer or its
// own, QuantizedMatmul, the server's errors passed through with their codes and
// messages, and the client-side checks.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "client/connection_pool.h"
#include "client/gemm_client.h"
#include "kernels/quant_formats.h"
#include "kernels/reference_gemm.h"
#include "tests/server_fixture.h"

namespace gemmd::testing {
namespace {

class ClientLibraryTest : public InProcessServerTest {
 protected:
  void SetUp() override { Start(); }
};

// FP32 [rows, cols] of N(0, 1) values as bytes.
std::string RandomFloats(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomBytes(DataType::kFloat32, count, rng);
}

TEST_F(ClientLibraryTest, MatmulMatchesTheReferenceInEitherBuffer) {
  const int64_t m = 33, n = 17, k = 300;
  const std::string a = RandomFloats(k * m, 1), b = RandomFloats(k * n, 2),
                    c = RandomFloats(m * n, 3);
  MatmulArgs args;
  args.a = {{k, m}, gemm::v1::DATA_TYPE_FLOAT32, a};  // stored [K, M]
  args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
  args.c = TensorRef{{m, n}, gemm::v1::DATA_TYPE_FLOAT32, c};
  args.transpose_a = true;
  args.alpha = 0.5f;
  args.beta = 2.0f;
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_a = true;
  p.alpha = 0.5f;
  p.beta = 2.0f;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), c.data(), nullptr});

  GemmClient client(channel_);
  MatmulResult owned;
  ASSERT_TRUE(client.Matmul(args, {}, &owned).ok());
  EXPECT_EQ(owned.c().size(), static_cast<size_t>(m * n * 4));
  EXPECT_LE(RelativeError(ref.data(), owned.c().data(), DataType::kFloat32, m * n), 1e-6);
  EXPECT_EQ(owned.info().c().shape_size(), 2);
  EXPECT_EQ(owned.info().c().shape(0), m);
  EXPECT_TRUE(owned.info().c().data().empty());
  EXPECT_EQ(owned.info().kernel(), "cpu_sgemm_openblas");
  EXPECT_EQ(owned.info().timing().batch_size(), 1u);

  std::vector<char> mine(static_cast<size_t>(m * n * 4) + 8);
  CallOptions options;
  options.c_out = absl::MakeSpan(mine);
  MatmulResult in_place;
  ASSERT_TRUE(client.Matmul(args, options, &in_place).ok());
  EXPECT_EQ(in_place.c().data(), mine.data());
  EXPECT_LE(RelativeError(ref.data(), mine.data(), DataType::kFloat32, m * n), 1e-6);

  // Async: done runs once, with the result filled.
  MatmulResult async;
  absl::Notification finished;
  absl::Status async_status = absl::UnknownError("not run");
  client.MatmulAsync(args, {}, &async, [&](absl::Status s) {
    async_status = s;
    finished.Notify();
  });
  finished.WaitForNotification();
  ASSERT_TRUE(async_status.ok()) << async_status;
  EXPECT_LE(RelativeError(ref.data(), async.c().data(), DataType::kFloat32, m * n), 1e-6);
}

// FLOAT64 operands with alpha and beta FP32 cannot hold: the library sends them in FP64
// (else the result would be off by FP32's rounding of them), on one connection and
// striped (C's FLOAT64 size counted right), within 1e-13 of the long-double reference.
TEST_F(ClientLibraryTest, Float64MatmulKeepsFp64ScalarsOnOneConnectionAndStriped) {
  const int64_t m = 40, n = 24, k = 300;
  std::mt19937_64 rng(5);
  const std::string a = RandomBytes(DataType::kFloat64, m * k, rng),
                    b = RandomBytes(DataType::kFloat64, k * n, rng),
                    c = RandomBytes(DataType::kFloat64, m * n, rng);
  MatmulArgs args;
  args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT64, a};
  args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT64, b};
  args.c = TensorRef{{m, n}, gemm::v1::DATA_TYPE_FLOAT64, c};
  args.alpha = 1.0 / 3.0;
  args.beta = -0.1;
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_type = p.b_type = p.c_type = DataType::kFloat64;
  p.precision = Precision::kFp64;
  p.alpha = 1.0 / 3.0;
  p.beta = -0.1;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), c.data(), nullptr});

  GemmClient client(channel_, std::make_shared<ConnectionPool>(
                                  Endpoint(absl::StrCat("127.0.0.1:", server_->port()))));
  for (int stripes : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(stripes, " stripes"));
    CallOptions options;
    options.stripes = stripes;
    MatmulResult result;
    ASSERT_TRUE(client.Matmul(args, options, &result).ok());
    ASSERT_EQ(result.c().size(), static_cast<size_t>(m * n * 8));
    EXPECT_EQ(result.info().c().dtype(), gemm::v1::DATA_TYPE_FLOAT64);
    EXPECT_EQ(result.info().precision(), gemm::v1::PRECISION_FP64);
    EXPECT_LE(RelativeError(ref.data(), result.c().data(), DataType::kFloat64, m * n), 1e-13);
    EXPECT_EQ(result.striped_steps().has_value(), stripes > 1);
  }
}

// A C of 8 MiB and more is copied out of its slices by several threads: every byte must
// still land in order.
TEST_F(ClientLibraryTest, ALargeResultArrivesWhole) {
  const int64_t m = 2048, n = 1100, k = 2;
  const std::string a = RandomFloats(m * k, 5), b = RandomFloats(k * n, 6);
  MatmulArgs args;
  args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  GemmClient client(channel_);
  MatmulResult result;
  ASSERT_TRUE(client.Matmul(args, {}, &result).ok());
  ASSERT_EQ(result.c().size(), static_cast<size_t>(m * n * 4));
  EXPECT_LE(RelativeError(ref.data(), result.c().data(), DataType::kFloat32, m * n), 1e-6);
}

TEST_F(ClientLibraryTest, QuantizedMatmulMatchesTheDequantizedReference) {
  const int64_t m = 3, n = 8, k = 64;
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(n * k));
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  absl::StatusOr<Nvfp4Matrix> qb = QuantizeNvfp4(b.data(), n, k);
  ASSERT_TRUE(qb.ok());
  std::vector<float> b_dequantized(b.size());
  ASSERT_TRUE(DequantizeNvfp4(*qb, b_dequantized.data()).ok());
  QuantizedMatmulArgs args;
  args.a_dense = TensorRef{{m, k}, gemm::v1::DATA_TYPE_FLOAT32,
                           absl::string_view(reinterpret_cast<const char*>(a.data()), a.size() * 4)};
  args.b = {{n, k},
            gemm::v1::QUANT_FORMAT_NVFP4,
            absl::string_view(reinterpret_cast<const char*>(qb->packed.data()), qb->packed.size()),
            absl::string_view(reinterpret_cast<const char*>(qb->block_scales.data()),
                              qb->block_scales.size()),
            qb->tensor_scale};
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.transpose_b = true;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b_dequantized.data(), nullptr, nullptr});
  GemmClient client(channel_);
  MatmulResult result;
  const absl::Status s = client.QuantizedMatmul(args, {}, &result);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LE(RelativeError(ref.data(), result.c().data(), DataType::kFloat32, m * n), 1e-5);

  QuantizedMatmulArgs neither;
  neither.b = args.b;
  EXPECT_EQ(client.QuantizedMatmul(neither, {}, &result).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientLibraryTest, ServerErrorsAndClientChecksComeBackWithTheirCodes) {
  const std::string a = RandomFloats(4 * 5, 1), b = RandomFloats(6 * 7, 2);
  MatmulArgs args;
  args.a = {{4, 5}, gemm::v1::DATA_TYPE_FLOAT32, a};
  args.b = {{6, 7}, gemm::v1::DATA_TYPE_FLOAT32, b};
  GemmClient client(channel_);
  MatmulResult result;
  absl::Status s = client.Matmul(args, {}, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "inner dimensions differ: op(a) is [M=4, K=5] (transpose_a=false) but op(b) is "
            "[K=6, N=7] (transpose_b=false)");

  args.b = {{5, 7}, gemm::v1::DATA_TYPE_FLOAT32, absl::string_view(b).substr(0, 5 * 7 * 4)};
  std::vector<char> small(16);
  CallOptions options;
  options.c_out = absl::MakeSpan(small);
  s = client.Matmul(args, options, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "C is 112 bytes; c_out holds 16");

  args.kernel = "no_such_kernel";
  s = client.Matmul(args, {}, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
}


// A call whose deadline passes before the server answers ends DEADLINE_EXCEEDED, every
// time: the client library once waited for gRPC to release the request's payload
// slices, which its retry layer kept until the call's context was gone (7 of 15 such
// gemm-cli calls hung). A hang fails here after 20 s instead of hanging the test.
TEST_F(ClientLibraryTest, ACallPastItsDeadlineReturns) {
  const int64_t n = 1024;
  const std::string a = RandomFloats(n * n, 5), b = RandomFloats(n * n, 6);
  GemmClient client(channel_);
  for (int i = 0; i < 20; ++i) {
    MatmulArgs args;
    args.a = {{n, n}, gemm::v1::DATA_TYPE_FLOAT32, a};
    args.b = {{n, n}, gemm::v1::DATA_TYPE_FLOAT32, b};
    CallOptions options;
    options.timeout = absl::Milliseconds(2);
    MatmulResult result;
    absl::Notification done;
    absl::Status status;
    client.MatmulAsync(args, options, &result, [&](absl::Status s) {
      status = std::move(s);
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)))
        << "call " << i << " never returned";
    EXPECT_TRUE(status.ok() || status.code() == absl::StatusCode::kDeadlineExceeded) << status;
  }
}

}  // namespace
}  // namespace gemmd::testing
