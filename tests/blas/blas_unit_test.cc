// libgemmd_blas.so's parts that need no server: the reference's argument checks, CBLAS's
// translation to a column-major call, the Matmul a call becomes, and the settings.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "client/blas/gemm_arguments.h"
#include "client/blas/remote_gemm.h"
#include "client/blas/settings.h"
#include "gtest/gtest.h"

namespace gemmd::blas {
namespace {

TEST(FortranGemmError, ReportsTheFirstBadArgumentInTheReferencesOrder) {
  EXPECT_EQ(FortranGemmError('N', 'N', 2, 3, 4, 2, 4, 2), 0);
  EXPECT_EQ(FortranGemmError('t', 'c', 2, 3, 4, 4, 3, 2), 0);  // either case; C = T
  EXPECT_EQ(FortranGemmError('X', 'Y', -1, -1, -1, 0, 0, 0), 1);
  EXPECT_EQ(FortranGemmError('N', 'Y', -1, -1, -1, 0, 0, 0), 2);
  EXPECT_EQ(FortranGemmError('N', 'N', -1, -1, -1, 0, 0, 0), 3);
  EXPECT_EQ(FortranGemmError('N', 'N', 0, -1, -1, 0, 0, 0), 4);
  EXPECT_EQ(FortranGemmError('N', 'N', 0, 0, -1, 0, 0, 0), 5);
  EXPECT_EQ(FortranGemmError('N', 'N', 0, 0, 0, 0, 1, 1), 8);   // lda >= max(1, rows)
  EXPECT_EQ(FortranGemmError('N', 'N', 5, 2, 3, 4, 3, 5), 8);   // rows of A: m
  EXPECT_EQ(FortranGemmError('T', 'N', 5, 2, 3, 3, 3, 5), 0);   // rows of A^T: k
  EXPECT_EQ(FortranGemmError('N', 'N', 5, 2, 3, 5, 2, 5), 10);  // rows of B: k
  EXPECT_EQ(FortranGemmError('N', 'T', 5, 2, 3, 5, 2, 5), 0);   // rows of B^T: n
  EXPECT_EQ(FortranGemmError('N', 'N', 5, 2, 3, 5, 3, 4), 13);
}

TEST(TranslateCblasGemm, ColumnMajorIsTheFortranCallWithPositionsShiftedByOne) {
  double a[1], b[1], c[1];
  CblasTranslation t = TranslateCblasGemm(Element::kFloat64, kCblasColMajor, kCblasTrans,
                                          kCblasNoTrans, 5, 2, 3, 2.0, a, 3, b, 3, 0.5, c, 5);
  ASSERT_EQ(t.error, 0);
  EXPECT_FALSE(t.row_major);
  EXPECT_TRUE(t.call.transpose_a);
  EXPECT_FALSE(t.call.transpose_b);
  EXPECT_EQ(t.call.m, 5);
  EXPECT_EQ(t.call.n, 2);
  EXPECT_EQ(t.call.a, a);
  EXPECT_EQ(t.call.b, b);
  EXPECT_EQ(t.call.alpha, 2.0);
  EXPECT_EQ(t.call.beta, 0.5);
  EXPECT_EQ(TranslateCblasGemm(Element::kFloat64, 0, kCblasNoTrans, kCblasNoTrans, 1, 1, 1, 1, a, 1,
                               b, 1, 0, c, 1)
                .error,
            1);
  EXPECT_EQ(TranslateCblasGemm(Element::kFloat64, kCblasColMajor, 7, kCblasNoTrans, 1, 1, 1, 1, a,
                               1, b, 1, 0, c, 1)
                .error,
            2);
  EXPECT_EQ(TranslateCblasGemm(Element::kFloat64, kCblasColMajor, kCblasNoTrans, 7, 1, 1, 1, 1, a,
                               1, b, 1, 0, c, 1)
                .error,
            3);
  EXPECT_EQ(TranslateCblasGemm(Element::kFloat64, kCblasColMajor, kCblasNoTrans, kCblasNoTrans, -1,
                               1, 1, 1, a, 1, b, 1, 0, c, 1)
                .error,
            4);
  EXPECT_EQ(TranslateCblasGemm(Element::kFloat64, kCblasColMajor, kCblasNoTrans, kCblasNoTrans, 4,
                               1, 1, 1, a, 3, b, 1, 0, c, 4)
                .error,
            9);
}

TEST(TranslateCblasGemm, RowMajorSwapsTheOperandsAndReportsTheSwappedPositions) {
  float a[1], b[1], c[1];
  // Row-major C[5,2] = A[5,3] B[3,2] is column-major C^T[2,5] = B^T[2,3] A^T[3,5].
  CblasTranslation t = TranslateCblasGemm(Element::kFloat32, kCblasRowMajor, kCblasNoTrans,
                                          kCblasTrans, 5, 2, 3, 1.0, a, 3, b, 3, 0, c, 2);
  ASSERT_EQ(t.error, 0);
  EXPECT_TRUE(t.row_major);
  EXPECT_EQ(t.call.m, 2);
  EXPECT_EQ(t.call.n, 5);
  EXPECT_EQ(t.call.k, 3);
  EXPECT_EQ(t.call.a, b);
  EXPECT_EQ(t.call.lda, 3);
  EXPECT_TRUE(t.call.transpose_a);  // B was transposed
  EXPECT_EQ(t.call.b, a);
  EXPECT_FALSE(t.call.transpose_b);
  // A bad M is the swapped call's N (Fortran 4, CBLAS 5): reference CBLAS passes 5 and its
  // cblas_xerbla maps it back to 4 while RowMajorStrg is set.
  t = TranslateCblasGemm(Element::kFloat32, kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, -1, 2, 3,
                         1, a, 3, b, 2, 0, c, 2);
  EXPECT_EQ(t.error, 5);
  EXPECT_TRUE(t.row_major);
  // A too-small lda is the swapped call's ldb (Fortran 10, passed as 11).
  t = TranslateCblasGemm(Element::kFloat32, kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, 5, 2, 3,
                         1, a, 2, b, 2, 0, c, 2);
  EXPECT_EQ(t.error, 11);
}

TEST(BuildMatmul, SendsTheRowMajorProductTheColumnMajorBytesAre) {
  // Column-major A[2,3] (lda 2) and B^T stored as [2,3] (ldb 4: padded, so packed).
  const double a[6] = {1, 2, 3, 4, 5, 6};
  const double b[12] = {1, 2, -1, -1, 3, 4, -1, -1, 5, 6, -1, -1};
  double c[4];
  GemmCall call;
  call.element = Element::kFloat64;
  call.transpose_b = true;
  call.m = 2, call.n = 2, call.k = 3;
  call.alpha = 0.25;
  call.a = a, call.lda = 2;
  call.b = b, call.ldb = 4;
  call.c = c, call.ldc = 2;
  RemoteOperands ops;
  BuildMatmul(call, &ops);
  // The server's A is op(B)^T = B's buffer read row-major as [3,2] and transposed.
  EXPECT_EQ(ops.args.a.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(ops.args.transpose_a);
  ASSERT_NE(ops.packed_a, nullptr);
  double packed[6];
  ASSERT_EQ(ops.args.a.data.size(), sizeof(packed));
  std::memcpy(packed, ops.args.a.data.data(), sizeof(packed));
  EXPECT_EQ(std::vector<double>(packed, packed + 6), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  // Its B is op(A)^T = A's bytes as [3,2], referenced in place.
  EXPECT_EQ(ops.args.b.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_FALSE(ops.args.transpose_b);
  EXPECT_EQ(ops.packed_b, nullptr);
  EXPECT_EQ(ops.args.b.data.data(), reinterpret_cast<const char*>(a));
  EXPECT_EQ(ops.args.a.dtype, gemm::v1::DATA_TYPE_FLOAT64);
  EXPECT_EQ(ops.args.precision, gemm::v1::PRECISION_FP64);
  EXPECT_EQ(ops.args.output_dtype, gemm::v1::DATA_TYPE_FLOAT64);
  EXPECT_EQ(*ops.args.alpha, 0.25);
  EXPECT_EQ(ops.args.beta, 0.0);  // C never travels

  call.element = Element::kFloat32;
  RemoteOperands f32;
  const float af[6] = {}, bf[12] = {};
  call.a = af, call.b = bf;
  BuildMatmul(call, &f32);
  EXPECT_EQ(f32.args.precision, gemm::v1::PRECISION_FP32);  // never a reduced precision
  EXPECT_EQ(f32.args.output_dtype, gemm::v1::DATA_TYPE_FLOAT32);
}

std::map<std::string, std::string>* environment = nullptr;
const char* FakeGetenv(const char* name) {
  auto it = environment->find(name);
  return it == environment->end() ? nullptr : it->second.c_str();
}

TEST(ReadSettings, DefaultsWhenUnsetAndReportsWhatItCannotRead) {
  std::map<std::string, std::string> env;
  environment = &env;
  Settings s = ReadSettings(FakeGetenv);
  EXPECT_EQ(s.target, "");
  EXPECT_EQ(s.min_flops, kDefaultMinFlops);
  EXPECT_EQ(s.timeout, absl::Seconds(kDefaultTimeoutSeconds));
  EXPECT_FALSE(s.verbose);
  EXPECT_TRUE(s.problems.empty());

  env = {{"GEMMD_TARGET", "h:1"},         {"GEMMD_BLAS_MIN_FLOPS", "1e9"},
         {"GEMMD_BLAS_TIMEOUT_S", "2.5"}, {"GEMMD_BLAS_RETRY_S", "0"},
         {"GEMMD_BLAS_VERBOSE", "1"},     {"GEMMD_TOKEN", "t"},
         {"GEMMD_TLS_CA_FILE", "ca.pem"}, {"GEMMD_BLAS_STRIPES", "8"}};
  s = ReadSettings(FakeGetenv);
  EXPECT_EQ(s.target, "h:1");
  EXPECT_EQ(s.min_flops, 1e9);
  EXPECT_EQ(s.timeout, absl::Milliseconds(2500));
  EXPECT_EQ(s.retry, absl::ZeroDuration());
  EXPECT_TRUE(s.verbose);
  EXPECT_EQ(s.security.token, "t");
  EXPECT_EQ(s.security.ca_file, "ca.pem");
  EXPECT_EQ(s.stripes, 8);
  EXPECT_TRUE(s.problems.empty());

  env = {{"GEMMD_BLAS_MIN_FLOPS", "-1"},
         {"GEMMD_BLAS_TIMEOUT_S", "0"},
         {"GEMMD_BLAS_VERBOSE", "yes"},
         {"GEMMD_BLAS_RETRY_S", "nan"},
         {"GEMMD_BLAS_STRIPES", "2.5"}};
  s = ReadSettings(FakeGetenv);
  EXPECT_EQ(s.min_flops, kDefaultMinFlops);
  EXPECT_EQ(s.timeout, absl::Seconds(kDefaultTimeoutSeconds));
  EXPECT_FALSE(s.verbose);
  EXPECT_EQ(s.stripes, kDefaultStripes);
  ASSERT_EQ(s.problems.size(), 5u);
  EXPECT_EQ(s.problems[0], "GEMMD_BLAS_MIN_FLOPS='-1' is not a non-negative number; using " +
                               std::to_string(static_cast<int64_t>(kDefaultMinFlops)));
}

TEST(ReadSettings, SharedMemoryIsAutoUnlessSaidOtherwise) {
  std::map<std::string, std::string> env;
  environment = &env;
  EXPECT_EQ(ReadSettings(FakeGetenv).shm, ShmMode::kAuto);
  for (const auto& [text, mode] : std::vector<std::pair<std::string, ShmMode>>{
           {"auto", ShmMode::kAuto}, {"0", ShmMode::kOff}, {"1", ShmMode::kOn}}) {
    env = {{"GEMMD_BLAS_SHM", text}};
    const Settings s = ReadSettings(FakeGetenv);
    EXPECT_EQ(s.shm, mode) << text;
    EXPECT_TRUE(s.problems.empty()) << text;
  }
  env = {{"GEMMD_BLAS_SHM", "yes"}};
  const Settings s = ReadSettings(FakeGetenv);
  EXPECT_EQ(s.shm, ShmMode::kAuto);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0], "GEMMD_BLAS_SHM='yes' is none of auto, 0 and 1; using auto");
}

TEST(IsLocalTarget, UnixSocketsAndLoopbackAddressesOnly) {
  for (const char* local :
       {"unix:/tmp/gemmd.sock", "unix-abstract:gemmd", "localhost:50051", "127.0.0.1:50051",
        "127.0.1.1:1", "[::1]:50051", "ipv4:127.0.0.1:5", "dns:///localhost:50051", "localhost"}) {
    EXPECT_TRUE(IsLocalTarget(local)) << local;
  }
  for (const char* remote : {"10.0.0.5:50051", "gpu-host:50051", "[2001:db8::1]:50051",
                             "dns:///gemmd.example:443", "localhost.example:1", "1127.0.0.1:1"}) {
    EXPECT_FALSE(IsLocalTarget(remote)) << remote;
  }
}

}  // namespace
}  // namespace gemmd::blas
