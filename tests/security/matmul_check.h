// What the security tests ask of a call that gets through: a random FP32 Matmul over the
// given channel, its C against the FP64 reference.
#ifndef GEMMD_TESTS_SECURITY_MATMUL_CHECK_H_
#define GEMMD_TESTS_SECURITY_MATMUL_CHECK_H_

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "client/gemm_client.h"
#include "kernels/reference_gemm.h"

namespace gemmd::testing {

// The relative Frobenius error of an m x k by k x n product, or the call's error.
inline absl::StatusOr<double> RandomMatmulError(std::shared_ptr<grpc::Channel> channel,
                                                int64_t m, int64_t n, int64_t k,
                                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> a(m * k), b(k * n);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  MatmulArgs args;
  args.a = {{m, k}, gemm::v1::DATA_TYPE_FLOAT32,
            {reinterpret_cast<const char*>(a.data()), a.size() * 4}};
  args.b = {{k, n}, gemm::v1::DATA_TYPE_FLOAT32,
            {reinterpret_cast<const char*>(b.data()), b.size() * 4}};
  MatmulResult result;
  if (absl::Status s = GemmClient(std::move(channel)).Matmul(args, {}, &result); !s.ok()) {
    return s;
  }
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  const std::vector<double> ref = ReferenceGemm(p, {a.data(), b.data(), nullptr, nullptr});
  const float* c = reinterpret_cast<const float*>(result.c().data());
  double err = 0, norm = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    err += (c[i] - ref[i]) * (c[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(err / norm);
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_SECURITY_MATMUL_CHECK_H_
