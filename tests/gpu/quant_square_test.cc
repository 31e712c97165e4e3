// The square quantized GPU kernels (quant_square.h) against host references built from
// the quantized operands: INT8 against int64 accumulation times the scales (exact up to
// the FP32 epilogue: <= 1e-6 relative per element), NVFP4 against the FP64 product of
// the dequantized operands (<= 1e-5 relative per row of C: e2m1 * e4m3 is exact in FP16,
// only the FP32 accumulation differs). Output poisoned with NaN before each launch.
// Shapes straddle the 128x128 tile and the 64-wide K step. Skips where there is no GPU.
#include "kernels/cuda/quantized/quant_square.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_raii.h"
#include "kernels/half.h"
#include "kernels/quant_formats.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace gemmd::gpu {
namespace {

struct Shape {
  int64_t m, n, k;
};

std::string ShapeName(const Shape& s) { return absl::StrCat(s.m, "x", s.n, "x", s.k); }

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  const size_t bytes = host.size() * sizeof(T);
  DeviceBuffer buffer = *DeviceBuffer::Allocate(std::max<size_t>(bytes, 16));
  EXPECT_EQ(cudaMemcpy(buffer.get(), host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return buffer;
}

// Runs `launch` into a NaN-poisoned [m, n] C and returns C.
template <typename Fn>
std::vector<float> RunPoisoned(int64_t m, int64_t n, Fn&& launch) {
  DeviceBuffer d_c = *DeviceBuffer::Allocate(std::max<size_t>(m * n * 4, 16));
  EXPECT_EQ(cudaMemset(d_c.get(), 0xFF, m * n * 4), cudaSuccess);
  const absl::Status st = launch(d_c.as<float>());
  EXPECT_TRUE(st.ok()) << st;
  std::vector<float> out(static_cast<size_t>(m * n));
  EXPECT_EQ(cudaMemcpy(out.data(), d_c.get(), out.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

// N(0,1) rows; with `wide`, row r is scaled by 2^-(r % 24), which drives NVFP4 block
// scales down into E4M3's subnormals (and to zero) and INT8 scales across 7 decades.
std::vector<float> RandomRows(int64_t rows, int64_t cols, bool wide, std::mt19937_64& rng) {
  const std::string bytes = testing::RandomBytes(DataType::kFloat32, rows * cols, rng);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  std::memcpy(x.data(), bytes.data(), bytes.size());
  if (wide) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = std::ldexp(x[r * cols + c], -(r % 24));
    }
  }
  return x;
}

// Both kernel families: wgmma (where this build and device have it) and mma.sync.
const auto kPaths = ::testing::Values(SquareMmaPath::kWgmma, SquareMmaPath::kMmaSync);

std::string PathName(SquareMmaPath path) {
  return path == SquareMmaPath::kWgmma ? "wgmma_" : "mma_";
}

#define SKIP_WITHOUT_PATH(path)                                                          \
  do {                                                                                 \
    SKIP_WITHOUT_GPU();                                                                \
    if ((path) == SquareMmaPath::kWgmma && !SquareWgmmaAvailable()) {                  \
      GTEST_SKIP() << "no sm_90a kernels in this build or not a compute capability 9.0 " \
                      "device";                                                        \
    }                                                                                  \
  } while (false)

// ---- INT8 ----------------------------------------------------------------------------

class SquareInt8Test : public ::testing::TestWithParam<std::tuple<SquareMmaPath, Shape>> {};

TEST_P(SquareInt8Test, MatchesInt64Reference) {
  const auto [path, s] = GetParam();
  SKIP_WITHOUT_PATH(path);
  const uint64_t seed = testing::TestSeed(77);
  SCOPED_TRACE(absl::StrCat(ShapeName(s), " seed ", seed));
  std::mt19937_64 rng(seed);
  const Int8Matrix a = *QuantizeInt8(RandomRows(s.m, s.k, true, rng).data(), s.m, s.k);
  const Int8Matrix b = *QuantizeInt8(RandomRows(s.n, s.k, false, rng).data(), s.n, s.k);

  DeviceBuffer da = Upload(a.values), dsa = Upload(a.scales);
  DeviceBuffer db = Upload(b.values), dsb = Upload(b.scales);
  const DeviceQuantizedWeight qa{QuantFormat::kInt8, da.get(), dsa.get(), 1.0f, s.m, s.k};
  const DeviceQuantizedWeight qb{QuantFormat::kInt8, db.get(), dsb.get(), 1.0f, s.n, s.k};
  const std::vector<float> c = RunPoisoned(s.m, s.n, [&](float* d_c) {
    return LaunchSquareQuantizedGemm(qa, qb, d_c, nullptr, path);
  });

  int64_t bad = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        acc += int64_t{a.values[i * s.k + k]} * b.values[j * s.k + k];
      }
      const double ref = static_cast<double>(acc) * a.scales[i] * b.scales[j];
      const double got = c[i * s.n + j];
      // Exact int32 sums; only float(acc) * sa * sb rounds (3 roundings, < 2e-7).
      if (!(std::fabs(got - ref) <= 1e-6 * std::fabs(ref))) {
        if (++bad <= 5) ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got << ", want " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SquareInt8Test,
    ::testing::Combine(kPaths,
                       ::testing::Values(Shape{1, 1, 16}, Shape{17, 15, 48}, Shape{128, 128, 64},
                                         Shape{129, 127, 80}, Shape{128, 256, 128},
                                         Shape{200, 257, 1040}, Shape{300, 520, 4096},
                                         Shape{256, 384, 4096})),
    [](const auto& info) {
      return PathName(std::get<0>(info.param)) + ShapeName(std::get<1>(info.param));
    });

// ---- NVFP4 ---------------------------------------------------------------------------

struct Nvfp4Case {
  Shape shape;
  bool fp16_a;  // dense FP16 A against NVFP4 B
  bool wide;    // rows over 2^-23..1, and negative scale bytes (see below)
};

std::string CaseName(const Nvfp4Case& c) {
  return absl::StrCat(c.fp16_a ? "F16xNVFP4_" : "NVFP4xNVFP4_", ShapeName(c.shape),
                      c.wide ? "_wide" : "");
}

class SquareNvfp4Test : public ::testing::TestWithParam<std::tuple<SquareMmaPath, Nvfp4Case>> {
};

TEST_P(SquareNvfp4Test, MatchesDequantizedReference) {
  const auto [path, tc] = GetParam();
  SKIP_WITHOUT_PATH(path);
  const Shape s = tc.shape;
  const uint64_t seed = testing::TestSeed(91);
  SCOPED_TRACE(absl::StrCat(CaseName(tc), " seed ", seed));
  std::mt19937_64 rng(seed);

  Nvfp4Matrix b = *QuantizeNvfp4(RandomRows(s.n, s.k, tc.wide, rng).data(), s.n, s.k);
  Nvfp4Matrix a;
  std::vector<uint16_t> a16;
  std::vector<float> a_deq(static_cast<size_t>(s.m * s.k)), b_deq(static_cast<size_t>(s.n * s.k));
  if (tc.fp16_a) {
    const std::string bytes = testing::RandomBytes(DataType::kFloat16, s.m * s.k, rng);
    a16.resize(static_cast<size_t>(s.m * s.k));
    std::memcpy(a16.data(), bytes.data(), bytes.size());
    for (size_t i = 0; i < a16.size(); ++i) a_deq[i] = HalfBitsToFloat(a16[i]);
  } else {
    a = *QuantizeNvfp4(RandomRows(s.m, s.k, tc.wide, rng).data(), s.m, s.k);
  }
  if (tc.wide) {
    // The quantizer never sets the E4M3 sign bit; the decoder honours it (quant_formats).
    for (size_t i = 0; i < b.block_scales.size(); i += 3) b.block_scales[i] ^= 0x80;
    for (size_t i = 0; i < a.block_scales.size(); i += 5) a.block_scales[i] ^= 0x80;
  }
  ASSERT_TRUE(DequantizeNvfp4(b, b_deq.data()).ok());
  if (!tc.fp16_a) ASSERT_TRUE(DequantizeNvfp4(a, a_deq.data()).ok());

  DeviceBuffer db = Upload(b.packed), dsb = Upload(b.block_scales);
  const DeviceQuantizedWeight qb{QuantFormat::kNvfp4, db.get(), dsb.get(), b.tensor_scale, s.n,
                                 s.k};
  std::vector<float> c;
  if (tc.fp16_a) {
    DeviceBuffer da = Upload(a16);
    c = RunPoisoned(s.m, s.n, [&](float* d_c) {
      return LaunchSquareFp16Nvfp4Gemm(da.get(), s.m, s.k, qb, d_c, nullptr, path);
    });
  } else {
    DeviceBuffer da = Upload(a.packed), dsa = Upload(a.block_scales);
    const DeviceQuantizedWeight qa{QuantFormat::kNvfp4, da.get(), dsa.get(), a.tensor_scale, s.m,
                                   s.k};
    c = RunPoisoned(s.m, s.n,
                    [&](float* d_c) { return LaunchSquareQuantizedGemm(qa, qb, d_c, nullptr, path); });
  }

  // Per row of C, so that the rows scaled down by 2^-23 count as much as the others.
  int64_t bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        ref += static_cast<double>(a_deq[i * s.k + k]) * b_deq[j * s.k + k];
      }
      const double d = c[i * s.n + j] - ref;
      num += d * d;
      den += ref * ref;
    }
    const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    worst = std::max(worst, std::isnan(err) ? INFINITY : err);
    if (!(err <= 1e-5)) {
      if (++bad <= 5) ADD_FAILURE() << "row " << i << ": relative error " << err;
    }
  }
  EXPECT_EQ(bad, 0) << "worst row error " << worst;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SquareNvfp4Test,
    ::testing::Combine(
        kPaths,
        ::testing::Values(
            Nvfp4Case{{1, 1, 32}, false, false}, Nvfp4Case{{17, 15, 96}, false, false},
            Nvfp4Case{{128, 128, 64}, false, false}, Nvfp4Case{{128, 256, 128}, false, false},
            Nvfp4Case{{129, 127, 160}, false, false}, Nvfp4Case{{200, 257, 1056}, false, false},
            Nvfp4Case{{256, 384, 2048}, false, false}, Nvfp4Case{{130, 140, 544}, false, true},
            Nvfp4Case{{1, 1, 32}, true, false}, Nvfp4Case{{17, 15, 96}, true, false},
            Nvfp4Case{{128, 256, 128}, true, false}, Nvfp4Case{{129, 127, 160}, true, false},
            Nvfp4Case{{200, 257, 1056}, true, false}, Nvfp4Case{{130, 140, 544}, true, true})),
    [](const auto& info) {
      return PathName(std::get<0>(info.param)) + CaseName(std::get<1>(info.param));
    });

// ---- what the kernels do not take (host checks only: no GPU needed) ---------------------

TEST(SquareQuantizedArgsTest, RejectsWhatItCannotRun) {
  alignas(16) static char buf[64];
  float* c = reinterpret_cast<float*>(buf);
  using Q = DeviceQuantizedWeight;
  const auto code = [&](const Q& a, const Q& b) {
    return LaunchSquareQuantizedGemm(a, b, c, nullptr).code();
  };
  const Q i8{QuantFormat::kInt8, buf, buf, 1.0f, 8, 64};
  const Q f4{QuantFormat::kNvfp4, buf, buf, 1.0f, 8, 64};
  EXPECT_EQ(SupportsSquareQuantizedGemm(i8, i8).code(), absl::StatusCode::kOk);
  EXPECT_EQ(SupportsSquareQuantizedGemm(f4, f4).code(), absl::StatusCode::kOk);

  Q x = i8;
  x.k = 40;  // INT8: K % 16
  EXPECT_EQ(code(x, x), absl::StatusCode::kFailedPrecondition);
  x = i8;
  x.data = buf + 1;  // misaligned rows
  EXPECT_EQ(code(x, i8), absl::StatusCode::kFailedPrecondition);
  x = f4;
  x.k = 40;  // NVFP4: not the format
  EXPECT_EQ(code(x, x), absl::StatusCode::kInvalidArgument);
  x.k = 48;  // the format, but not 16-byte rows of codes
  EXPECT_EQ(code(x, x), absl::StatusCode::kFailedPrecondition);
  x = f4;
  x.scales = buf + 2;
  EXPECT_EQ(code(f4, x), absl::StatusCode::kFailedPrecondition);
  x = f4;
  x.tensor_scale = NAN;
  EXPECT_EQ(code(x, f4), absl::StatusCode::kInvalidArgument);
  x = f4;
  x.k = 96;  // K of A and B differ
  EXPECT_EQ(code(x, f4), absl::StatusCode::kInvalidArgument);
  x = f4;
  x.n = -1;
  EXPECT_EQ(code(x, f4), absl::StatusCode::kInvalidArgument);
  x = f4;
  x.data = nullptr;
  EXPECT_EQ(code(f4, x), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(i8, f4), absl::StatusCode::kFailedPrecondition);  // mixed formats
  EXPECT_EQ(LaunchSquareQuantizedGemm(f4, f4, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  if (!SquareWgmmaAvailable()) {
    EXPECT_EQ(LaunchSquareQuantizedGemm(f4, f4, c, nullptr, SquareMmaPath::kWgmma).code(),
              absl::StatusCode::kFailedPrecondition);
  }

  EXPECT_EQ(SupportsSquareFp16Nvfp4Gemm(buf, 8, 64, f4).code(), absl::StatusCode::kOk);
  EXPECT_EQ(LaunchSquareFp16Nvfp4Gemm(buf, 8, 64, i8, c, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);  // FP16 x INT8
  EXPECT_EQ(LaunchSquareFp16Nvfp4Gemm(buf + 8, 8, 64, f4, c, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);  // misaligned A
  EXPECT_EQ(LaunchSquareFp16Nvfp4Gemm(buf, 8, 32, f4, c, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // K differs
  EXPECT_EQ(LaunchSquareFp16Nvfp4Gemm(nullptr, 8, 64, f4, c, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmd::gpu
