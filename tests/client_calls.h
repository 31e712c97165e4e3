// What the client-library tests against a whole server share: random operands by seed,
// a vector's bytes, and two QuantizedMatmul calls (INT8 x INT8, and FP16 A against an
// NVFP4 weight) with the operands they point into.
#ifndef GEMMD_TESTS_CLIENT_CALLS_H_
#define GEMMD_TESTS_CLIENT_CALLS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/gemm_client.h"
#include "kernels/quant_formats.h"
#include "tests/test_util.h"

namespace gemmd::testing {

inline std::string Random(DataType type, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomBytes(type, count, rng);
}

template <typename T>
absl::string_view Bytes(const std::vector<T>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// C[m, n] = A[m, k] * B[n, k]^T of N(0,1) data, quantized here. The args point into the
// members: keep the object where it was made.
struct QuantizedCalls {
  Int8Matrix a8, b8;
  Nvfp4Matrix b4;
  std::string a16;
  QuantizedMatmulArgs int8, nvfp4;
};

inline std::unique_ptr<QuantizedCalls> MakeQuantizedCalls(int64_t m, int64_t n, int64_t k) {
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n * k)), y(static_cast<size_t>(m * k));
  for (float& v : x) v = normal(rng);
  for (float& v : y) v = normal(rng);
  auto calls = std::make_unique<QuantizedCalls>();
  QuantizedCalls& c = *calls;
  c.b8 = *QuantizeInt8(x.data(), n, k);
  c.a8 = *QuantizeInt8(y.data(), m, k);
  c.b4 = *QuantizeNvfp4(x.data(), n, k);
  c.a16 = Random(DataType::kFloat16, m * k, 9);
  c.int8.a = QuantizedTensorRef{{m, k}, gemm::v1::QUANT_FORMAT_INT8, Bytes(c.a8.values),
                                Bytes(c.a8.scales), 0.0f};
  c.int8.b = {{n, k}, gemm::v1::QUANT_FORMAT_INT8, Bytes(c.b8.values), Bytes(c.b8.scales), 0.0f};
  c.nvfp4.a_dense = TensorRef{{m, k}, gemm::v1::DATA_TYPE_FLOAT16, c.a16};
  c.nvfp4.b = {{n, k}, gemm::v1::QUANT_FORMAT_NVFP4, Bytes(c.b4.packed),
               Bytes(c.b4.block_scales), c.b4.tensor_scale};
  return calls;
}

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_CLIENT_CALLS_H_
