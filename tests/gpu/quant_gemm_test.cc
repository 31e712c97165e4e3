// The skinny quantized GPU GEMM against the FP64 product of the dequantized operands
// (the kernel, not the format's loss). Tolerance 1e-5 relative (Frobenius): the
// dequantized B is exact in FP16, FP16 A is exact, FP32 A goes as hi + lo FP16 (error
// ~2^-22 per element), FP32 accumulation. Skips where there is no GPU.
#include "kernels/cuda/quantized/quant_gemm.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_raii.h"
#include "kernels/cuda/quantized/nvfp4_expand.h"
#include "kernels/cuda/quantized/quant_relayout.h"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/half.h"
#include "kernels/quant_formats.h"
#include "kernels/quant_prepack.h"
#include "kernels/reference_gemm.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace gemmd::gpu {
namespace {

struct Case {
  QuantFormat format;
  DataType a_type;
  int64_t m, n, k;
  SkinnyQuantizedTuning tuning = {};
  int a_exponent = 0;  // A (FP32 or BF16) times 2^a_exponent: outside FP16's range
};

std::string Name(const Case& c) {
  const char* path = c.tuning.path == SkinnyPath::kStream    ? "_stream"
                     : c.tuning.path == SkinnyPath::kClassic ? "_classic"
                                                             : "";
  return absl::StrCat(
      QuantFormatName(c.format), "_", DataTypeName(c.a_type), "_", c.m, "x", c.n, "x", c.k, path,
      c.tuning.k_splits > 0 ? absl::StrCat("_splits", c.tuning.k_splits) : "",
      c.a_exponent > 0 ? absl::StrCat("_times2e", c.a_exponent) : "",
      c.a_exponent < 0 ? absl::StrCat("_times2em", -c.a_exponent) : "");
}

// Wide activations far outside FP16's range (the kernel scales them per row first).
Case Scaled(QuantFormat format, DataType a_type, int64_t m, int64_t n, int64_t k, int exponent) {
  return Case{format, a_type, m, n, k, {}, exponent};
}

// A's values times 2^exponent, in place (exact: a power of two, inside FP32 / BF16 range).
void ScaleActivations(DataType type, int exponent, std::string* bytes) {
  if (exponent == 0) return;
  if (type == DataType::kFloat32) {
    auto* v = reinterpret_cast<float*>(bytes->data());
    for (size_t i = 0; i < bytes->size() / 4; ++i) v[i] = std::ldexp(v[i], exponent);
  } else {
    ASSERT_EQ(type, DataType::kBFloat16);
    auto* v = reinterpret_cast<uint16_t*>(bytes->data());
    for (size_t i = 0; i < bytes->size() / 2; ++i) {
      v[i] = FloatToBf16Bits(std::ldexp(Bf16BitsToFloat(v[i]), exponent));
    }
  }
}

// The streaming path (FP16 A, NVFP4, M <= 64), forced, with a K split over a cluster.
Case Stream(int64_t m, int64_t n, int64_t k, int k_splits) {
  return Case{QuantFormat::kNvfp4, DataType::kFloat16, m, n, k, {k_splits, 0, SkinnyPath::kStream}};
}

// The same for INT8 B (K % 16, per-row scales in the epilogue).
Case StreamInt8(int64_t m, int64_t n, int64_t k, int k_splits) {
  return Case{QuantFormat::kInt8, DataType::kFloat16, m, n, k, {k_splits, 0, SkinnyPath::kStream}};
}

class SkinnyQuantizedTest : public ::testing::TestWithParam<Case> {};

DeviceBuffer Upload(const void* host, size_t bytes) {
  DeviceBuffer buffer = *DeviceBuffer::Allocate(std::max<size_t>(bytes, 16));
  EXPECT_EQ(cudaMemcpy(buffer.get(), host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return buffer;
}

TEST_P(SkinnyQuantizedTest, MatchesDequantizedReference) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const uint64_t seed = testing::TestSeed(31);
  SCOPED_TRACE(absl::StrCat(Name(c), " seed ", seed));
  std::mt19937_64 rng(seed);
  std::string a_bytes = testing::RandomBytes(c.a_type, c.m * c.k, rng);
  ScaleActivations(c.a_type, c.a_exponent, &a_bytes);
  const std::string w_bytes = testing::RandomBytes(DataType::kFloat32, c.n * c.k, rng);
  const float* w = reinterpret_cast<const float*>(w_bytes.data());

  // Quantize B on the host; its dequantized values are the reference's B.
  std::vector<float> b_deq(static_cast<size_t>(c.n * c.k));
  std::string data, scales;
  float tensor_scale = 1.0f;
  if (c.format == QuantFormat::kInt8) {
    const Int8Matrix q = *QuantizeInt8(w, c.n, c.k);
    DequantizeInt8(q, b_deq.data());
    data.assign(reinterpret_cast<const char*>(q.values.data()), q.values.size());
    scales.assign(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * 4);
  } else {
    const Nvfp4Matrix q = *QuantizeNvfp4(w, c.n, c.k);
    ASSERT_TRUE(DequantizeNvfp4(q, b_deq.data()).ok());
    data.assign(reinterpret_cast<const char*>(q.packed.data()), q.packed.size());
    scales.assign(reinterpret_cast<const char*>(q.block_scales.data()), q.block_scales.size());
    tensor_scale = q.tensor_scale;
  }
  GemmProblem p;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.transpose_b = true;
  p.a_type = c.a_type;
  std::vector<double> ref;
  {
    // The reference takes one input dtype: widen A to FP32 (exact) next to FP32 B.
    std::vector<float> a32(static_cast<size_t>(c.m * c.k));
    for (int64_t i = 0; i < c.m * c.k; ++i) {
      a32[i] = static_cast<float>(LoadAsDouble(a_bytes.data(), c.a_type, i));
    }
    p.a_type = DataType::kFloat32;
    ref = ReferenceGemm(p, {a32.data(), b_deq.data(), nullptr, nullptr});
  }

  DeviceBuffer d_a = Upload(a_bytes.data(), a_bytes.size());
  DeviceBuffer d_data = Upload(data.data(), data.size());
  DeviceBuffer d_scales = Upload(scales.data(), scales.size());
  DeviceBuffer d_c = *DeviceBuffer::Allocate(static_cast<size_t>(c.m * c.n * 4));
  ASSERT_EQ(cudaMemset(d_c.get(), 0xFF, c.m * c.n * 4), cudaSuccess);  // NaN: must be written
  const size_t ws_bytes = SkinnyQuantizedWorkspaceBytes(c.a_type, c.m, c.k);
  DeviceBuffer ws = *DeviceBuffer::Allocate(ws_bytes);
  DeviceQuantizedWeight b{c.format, d_data.get(), d_scales.get(), tensor_scale, c.n, c.k};
  ASSERT_TRUE(LaunchSkinnyQuantizedGemm(d_a.get(), c.a_type, c.m, b, d_c.as<float>(), ws.get(),
                                        ws_bytes, nullptr, c.tuning)
                  .ok());
  std::vector<float> out(static_cast<size_t>(c.m * c.n));
  ASSERT_EQ(cudaMemcpy(out.data(), d_c.get(), out.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_LE(RelativeError(ref.data(), out.data(), DataType::kFloat32, c.m * c.n), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SkinnyQuantizedTest,
    ::testing::Values(Case{QuantFormat::kNvfp4, DataType::kFloat16, 1, 256, 512},
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 16, 1000, 1024},
                      Case{QuantFormat::kNvfp4, DataType::kFloat32, 5, 257, 528},
                      Case{QuantFormat::kNvfp4, DataType::kFloat32, 64, 96, 2048},
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 33, 31, 16},
                      // Fewer 128-wide chunks than warps: 6 for 8 warps, and 2.
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 3, 100, 768},
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 8, 17, 256},
                      // The shared-memory ring (FP16 A, M <= 8): 9 block chunks of 1024
                      // split over blocks, the last one 64 values long (a partial
                      // 16-byte piece of scales), rows past N in both row blocks.
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 2, 40, 8256},
                      Case{QuantFormat::kInt8, DataType::kFloat16, 7, 33, 1040},
                      // K % 64 != 0: NVFP4 at M <= 8 falls back to the register path.
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 4, 70, 1056},
                      Case{QuantFormat::kInt8, DataType::kFloat16, 1, 512, 512},
                      Case{QuantFormat::kInt8, DataType::kFloat32, 16, 300, 1000},
                      Case{QuantFormat::kInt8, DataType::kFloat16, 48, 65, 77},
                      Case{QuantFormat::kInt8, DataType::kFloat32, 64, 128, 4096},
                      // The streaming path: a partial last stage (576 = 512 + 64); a
                      // cluster of 4 over 129 rows (a partial block) and 12 A rows (a
                      // partial A tile); 5 stages over 4 blocks (the last one has none);
                      // 2 blocks, the second with 64 values; one partial stage, 9 rows;
                      // the launcher's own split; and M = 16 on the classic path.
                      Stream(1, 300, 576, 1), Stream(12, 129, 8192, 4),
                      Stream(16, 256, 2560, 4), Stream(8, 520, 1088, 2), Stream(9, 64, 64, 0),
                      // 17-64 rows (4 and 8 A tiles, 256-value stages at 8): partial
                      // tiles, stages, blocks and clusters as above.
                      Stream(24, 300, 1088, 2), Stream(33, 129, 2560, 4), Stream(40, 520, 576, 1),
                      Stream(64, 256, 8192, 0), Stream(57, 64, 320, 2), Stream(64, 64, 64, 0),
                      // INT8: K % 16 tails (1040 = 4 x 256 + 16, 144 = 128 + 16), every A
                      // tile count, clusters of 2 and 4, an empty split.
                      StreamInt8(1, 64, 16, 0), StreamInt8(12, 129, 4096, 4),
                      StreamInt8(16, 300, 1040, 2), StreamInt8(33, 64, 8192, 4),
                      StreamInt8(40, 256, 2560, 0), StreamInt8(64, 520, 144, 1),
                      StreamInt8(64, 100, 272, 4),
                      // BF16 A on the streaming path (its hi plane and row scales), far
                      // outside FP16's range either way.
                      Case{QuantFormat::kNvfp4, DataType::kBFloat16, 16, 300, 1024,
                           {2, 0, SkinnyPath::kStream}},
                      Case{QuantFormat::kInt8, DataType::kBFloat16, 40, 129, 1040,
                           {4, 0, SkinnyPath::kStream}, 100},
                      Case{QuantFormat::kNvfp4, DataType::kBFloat16, 64, 256, 576,
                           {1, 0, SkinnyPath::kStream}, -120},
                      Case{QuantFormat::kNvfp4, DataType::kFloat16, 16, 4096, 4096},
                      Case{QuantFormat::kNvfp4,
                           DataType::kFloat16,
                           16,
                           1000,
                           1024,
                           {0, 0, SkinnyPath::kClassic}},
                      // BF16 activations, and wide ones beyond FP16's range either way
                      // (unscaled, 2^20 overflowed FP16 and 2^-30 lost its bits).
                      Case{QuantFormat::kNvfp4, DataType::kBFloat16, 1, 300, 512},
                      Case{QuantFormat::kInt8, DataType::kBFloat16, 13, 77, 272},
                      Scaled(QuantFormat::kNvfp4, DataType::kFloat32, 4, 129, 1024, 20),
                      Scaled(QuantFormat::kNvfp4, DataType::kFloat32, 16, 64, 512, -30),
                      Scaled(QuantFormat::kInt8, DataType::kBFloat16, 9, 100, 320, 100),
                      Scaled(QuantFormat::kInt8, DataType::kFloat32, 40, 50, 96, -120)),
    [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

// An Inf activation makes its row of C +-Inf (NaN where the weight is 0), as FP32 would,
// not NaN throughout (FP32 A is split into FP16 hi + lo: an Inf's lo must not be Inf - Inf).
TEST(SkinnyQuantizedInfTest, InfActivationGivesSignedInf) {
  SKIP_WITHOUT_GPU();
  const int64_t m = 2, n = 16, k = 64;
  std::mt19937_64 rng(testing::TestSeed(37));
  std::string a_bytes = testing::RandomBytes(DataType::kFloat32, m * k, rng);
  reinterpret_cast<float*>(a_bytes.data())[0] = std::numeric_limits<float>::infinity();
  const std::string w_bytes = testing::RandomBytes(DataType::kFloat32, n * k, rng);
  const Nvfp4Matrix q = *QuantizeNvfp4(reinterpret_cast<const float*>(w_bytes.data()), n, k);
  std::vector<float> b_deq(static_cast<size_t>(n * k));
  ASSERT_TRUE(DequantizeNvfp4(q, b_deq.data()).ok());
  DeviceBuffer d_a = Upload(a_bytes.data(), a_bytes.size());
  DeviceBuffer d_data = Upload(q.packed.data(), q.packed.size());
  DeviceBuffer d_scales = Upload(q.block_scales.data(), q.block_scales.size());
  DeviceBuffer d_c = *DeviceBuffer::Allocate(static_cast<size_t>(m * n * 4));
  const size_t ws_bytes = SkinnyQuantizedWorkspaceBytes(DataType::kFloat32, m, k);
  DeviceBuffer ws = *DeviceBuffer::Allocate(ws_bytes);
  const DeviceQuantizedWeight b{QuantFormat::kNvfp4, d_data.get(), d_scales.get(),
                                q.tensor_scale, n, k};
  ASSERT_TRUE(LaunchSkinnyQuantizedGemm(d_a.get(), DataType::kFloat32, m, b, d_c.as<float>(),
                                        ws.get(), ws_bytes, nullptr)
                  .ok());
  std::vector<float> out(static_cast<size_t>(m * n));
  ASSERT_EQ(cudaMemcpy(out.data(), d_c.get(), out.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  const float* a = reinterpret_cast<const float*>(a_bytes.data());
  for (int64_t j = 0; j < n; ++j) {
    SCOPED_TRACE(absl::StrCat("column ", j, ", weight ", b_deq[j * k]));
    const float w0 = b_deq[j * k];  // the weight the Inf meets
    if (w0 == 0.0f) {
      EXPECT_TRUE(std::isnan(out[j]));
    } else {
      EXPECT_EQ(out[j], w0 > 0 ? std::numeric_limits<float>::infinity()
                               : -std::numeric_limits<float>::infinity());
    }
    double ref = 0;  // the finite row is unaffected
    for (int64_t kk = 0; kk < k; ++kk) ref += double{a[k + kk]} * b_deq[j * k + kk];
    EXPECT_NEAR(out[n + j], ref, 1e-5 * (std::abs(ref) + 1.0));
  }
}

TEST(SkinnyQuantizedArgsTest, RejectsWhatItCannotRun) {
  DeviceQuantizedWeight b{QuantFormat::kNvfp4, &b, &b, 1.0f, 8, 24};  // K % 16 != 0
  char ws[16];
  EXPECT_EQ(LaunchSkinnyQuantizedGemm(ws, DataType::kFloat16, 1, b, nullptr, ws, 16, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  b.k = 32;
  EXPECT_EQ(LaunchSkinnyQuantizedGemm(ws, DataType::kFloat16, 65, b, nullptr, ws, 16, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchSkinnyQuantizedGemm(ws, DataType::kInt8, 1, b, reinterpret_cast<float*>(ws),
                                      ws, 16, nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // BF16 needs its FP16 planes: 2 x 64 bytes (rounded to 256 each) and a row scale.
  EXPECT_EQ(SkinnyQuantizedWorkspaceBytes(DataType::kBFloat16, 1, 32), 768u);
  EXPECT_EQ(LaunchSkinnyQuantizedGemm(ws, DataType::kBFloat16, 1, b, reinterpret_cast<float*>(ws),
                                      ws, 16, nullptr)
                .message(),
            "skinny quantized GEMM: workspace too small");
}

// The swap-AB kernels on weights in the swap-AB layouts (quant_prepack.h), FP16 A.
struct SwapAbCase {
  QuantFormat format;
  int64_t m, n, k;
  SwapAbOptions options;
  bool nvfp4_a = false;  // A NVFP4 too (LaunchSwapAbNvfp4xNvfp4, expanded to FP16), else FP16
};

class SwapAbTest : public ::testing::TestWithParam<SwapAbCase> {};

TEST_P(SwapAbTest, MatchesDequantizedReference) {
  SKIP_WITHOUT_GPU();
  const SwapAbCase c = GetParam();
  if (!ResolveSwapAbPath(c.options.path).ok()) GTEST_SKIP() << "no wgmma on this GPU or build";
  const uint64_t seed = testing::TestSeed(37);
  SCOPED_TRACE(
      absl::StrCat(QuantFormatName(c.format), " ", c.m, "x", c.n, "x", c.k, " seed ", seed));
  std::mt19937_64 rng(seed);
  const std::string a_bytes = testing::RandomBytes(DataType::kFloat16, c.m * c.k, rng);
  const std::string w_bytes = testing::RandomBytes(DataType::kFloat32, c.n * c.k, rng);
  const float* w = reinterpret_cast<const float*>(w_bytes.data());
  std::vector<float> b_deq(static_cast<size_t>(c.n * c.k));
  std::vector<uint8_t> packed;
  float tensor_scale = 1.0f;
  // The layout's bands, or the options' narrower ones.
  const int64_t band = c.options.band_rows > 0 ? c.options.band_rows : kSwapAbBandRows;
  if (c.format == QuantFormat::kInt8) {
    const Int8Matrix q = *QuantizeInt8(w, c.n, c.k);
    DequantizeInt8(q, b_deq.data());
    packed.resize(q.values.size() + 4 * q.scales.size());
    ASSERT_TRUE(PrepackSwapAbInBands(c.format, reinterpret_cast<const uint8_t*>(q.values.data()),
                                     reinterpret_cast<const uint8_t*>(q.scales.data()), c.n, c.k,
                                     band, packed.data())
                    .ok());
  } else {
    const Nvfp4Matrix q = *QuantizeNvfp4(w, c.n, c.k);
    ASSERT_TRUE(DequantizeNvfp4(q, b_deq.data()).ok());
    packed.resize(q.packed.size() + q.block_scales.size());
    ASSERT_TRUE(PrepackSwapAbInBands(c.format, q.packed.data(), q.block_scales.data(), c.n, c.k,
                                     band, packed.data())
                    .ok());
    tensor_scale = q.tensor_scale;
  }

  std::vector<float> a32(static_cast<size_t>(c.m * c.k));
  std::optional<Nvfp4Matrix> qa;
  if (c.nvfp4_a) {
    const std::string x = testing::RandomBytes(DataType::kFloat32, c.m * c.k, rng);
    qa = *QuantizeNvfp4(reinterpret_cast<const float*>(x.data()), c.m, c.k);
    ASSERT_TRUE(DequantizeNvfp4(*qa, a32.data()).ok());
  } else {
    for (int64_t i = 0; i < c.m * c.k; ++i) {
      a32[i] = static_cast<float>(LoadAsDouble(a_bytes.data(), DataType::kFloat16, i));
    }
  }
  GemmProblem p;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.transpose_b = true;
  p.a_type = DataType::kFloat32;
  const std::vector<double> ref = ReferenceGemm(p, {a32.data(), b_deq.data(), nullptr, nullptr});

  DeviceBuffer d_a = c.nvfp4_a ? Upload(qa->packed.data(), qa->packed.size())
                               : Upload(a_bytes.data(), a_bytes.size());
  DeviceBuffer d_a_scales = c.nvfp4_a ? Upload(qa->block_scales.data(), qa->block_scales.size())
                                      : *DeviceBuffer::Allocate(16);
  DeviceBuffer d_w = Upload(packed.data(), packed.size());
  DeviceBuffer d_c = *DeviceBuffer::Allocate(static_cast<size_t>(c.m * c.n * 4));
  DeviceBuffer d_a_half = *DeviceBuffer::Allocate(c.nvfp4_a ? Nvfp4HalfBytes(c.m, c.k) : 16);
  ASSERT_EQ(cudaMemset(d_c.get(), 0xFF, c.m * c.n * 4), cudaSuccess);  // NaN: must be written
  const absl::Status launched =
      c.nvfp4_a ? LaunchSwapAbNvfp4xNvfp4(d_a.get(), d_a_scales.get(), qa->tensor_scale, c.m,
                                          d_w.get(), tensor_scale, c.n, c.k, d_c.as<float>(),
                                          d_a_half.get(), nullptr, c.options)
      : c.format == QuantFormat::kInt8
          ? LaunchSwapAbInt8(d_a.get(), c.m, d_w.get(), c.n, c.k, d_c.as<float>(), nullptr,
                             c.options)
          : LaunchSwapAbNvfp4(d_a.get(), c.m, d_w.get(), tensor_scale, c.n, c.k, d_c.as<float>(),
                              nullptr, c.options);
  ASSERT_TRUE(launched.ok()) << launched;
  std::vector<float> out(static_cast<size_t>(c.m * c.n));
  ASSERT_EQ(cudaMemcpy(out.data(), d_c.get(), out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_LE(RelativeError(ref.data(), out.data(), DataType::kFloat32, c.m * c.n), 1e-5);
}

// Both kernels on every token-tile and row-tile configuration, partial token tiles, n not
// a multiple of 32; the wgmma kernel also on both block heights and every K split, with
// partial blocks, splits of unequal K and splits with no K at all.
std::vector<SwapAbCase> SwapAbCases() {
  std::vector<SwapAbCase> cases;
  for (QuantFormat format : {QuantFormat::kNvfp4, QuantFormat::kInt8}) {
    for (SwapAbPath path : {SwapAbPath::kMmaSync, SwapAbPath::kWgmma}) {
      for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 16, 64},
                                                                               {1, 256, 1024},
                                                                               {5, 48, 192},
                                                                               {8, 128, 4096},
                                                                               {9, 64, 256},
                                                                               {16, 112, 640},
                                                                               {17, 96, 128},
                                                                               {32, 48, 512},
                                                                               {33, 64, 2048},
                                                                               {64, 80, 320},
                                                                               {64, 256, 1024}}) {
        cases.push_back({format, m, n, k, {path}});
      }
    }
    for (auto [m, n, k, rows, splits] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, int, int>>{{3, 400, 320, 128, 1},
                                                                      {3, 400, 320, 256, 1},
                                                                      {12, 272, 576, 128, 2},
                                                                      {24, 528, 704, 256, 4},
                                                                      {40, 144, 448, 128, 8},
                                                                      {64, 512, 192, 256, 8},
                                                                      {64, 4096, 8192, 0, 0},
                                                                      {16, 8192, 1024, 0, 0}}) {
      for (int k_tiles : {1, 4}) {
        cases.push_back({format, m, n, k, {SwapAbPath::kWgmma, 0, rows, splits, k_tiles}});
      }
      if (rows == 256) {  // and as four warpgroups of one set
        cases.push_back({format, m, n, k, {SwapAbPath::kWgmma, 0, rows, splits, 4, 4}});
      }
    }
    // Bands of 128 rows, 128 rows a block (gemm-bench --swapab-band=128).
    for (auto [m, n, k, splits] : std::vector<std::tuple<int64_t, int64_t, int64_t, int>>{
             {1, 128, 64, 1}, {5, 384, 704, 0}, {16, 1024, 2048, 2}, {64, 8192, 1024, 0}}) {
      SwapAbOptions options{SwapAbPath::kWgmma, 0, 128, splits, 4};
      options.band_rows = 128;
      cases.push_back({format, m, n, k, options});
    }
    // wgmma past 64 rows of A: blocks of 128 tokens, whole and partial, and of a band of 256
    // weight rows, whole and short; K from one tile to 8192, and 16384 (FP16 A: 64 tokens a
    // block, the sums promoted).
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{65, 16, 64},
                                                                             {100, 272, 192},
                                                                             {128, 256, 1024},
                                                                             {129, 528, 640},
                                                                             {130, 400, 320},
                                                                             {300, 784, 2048},
                                                                             {520, 1024, 4096},
                                                                             {256, 512, 8192},
                                                                             {200, 256, 16384}}) {
      // Waiting once a set or once a K tile; one set a consumer on half a band, 256 tokens a
      // block; persistent blocks (3 of them, each taking several items) and the TMA-stored
      // epilogue, alone and together.
      struct Square {
        int waits, tokens, grid, store, blocks;
      };
      for (const Square& q :
           {Square{1, 128, 1, 1, 0}, Square{2, 128, 1, 1, 0}, Square{0, 256, 1, 1, 0},
            Square{1, 128, 2, 1, 3}, Square{1, 128, 1, 2, 0}, Square{1, 128, 2, 2, 3},
            Square{0, 256, 2, 2, 3}}) {
        const bool known = q.grid == 1 && q.store == 1;
        if (!known && k == 8192) continue;  // the K = 16384 case covers long K
        SwapAbOptions options{SwapAbPath::kWgmma};
        options.square_waits = q.waits;
        options.square_tokens = q.tokens;
        options.square_grid = q.grid;
        options.square_store = q.store;
        options.square_blocks = q.blocks;
        cases.push_back({format, m, n, k, options});
      }
      // NVFP4 A (expanded to FP16 first, for the FP16 A kernel), the defaults and one block
      // an item.
      if (format == QuantFormat::kNvfp4) {
        cases.push_back({format, m, n, k, {SwapAbPath::kWgmma}, true});
        SwapAbOptions plain{SwapAbPath::kWgmma};
        plain.square_tokens = 128;
        plain.square_grid = 1;
        plain.square_store = 1;
        cases.push_back({format, m, n, k, plain, true});
      }
    }
    // Persistent blocks at their default count (one an SM), with more items than SMs: 9
    // blocks of 128 tokens x 17 bands (a short one), 153 items, or 5 blocks of 256 tokens x
    // 33 half-bands, 165.
    for (int tokens : {128, 256}) {
      SwapAbOptions options{SwapAbPath::kWgmma};
      options.square_tokens = tokens;
      options.square_grid = 2;
      options.square_store = 2;
      cases.push_back({format, 1100, 4112, 128, options});
    }
    // The same up to 64 rows: the expanded A goes to the skinny wgmma kernel.
    if (format == QuantFormat::kNvfp4) {
      for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
               {1, 16, 64}, {16, 272, 1024}, {64, 512, 2048}}) {
        cases.push_back({format, m, n, k, {SwapAbPath::kWgmma}, true});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwapAbTest, ::testing::ValuesIn(SwapAbCases()),
                         [](const ::testing::TestParamInfo<SwapAbCase>& info) {
                           const SwapAbOptions& o = info.param.options;
                           return absl::StrCat(
                               QuantFormatName(info.param.format), "_",
                               o.path == SwapAbPath::kWgmma ? "wgmma" : "mma", "_", info.param.m,
                               "x", info.param.n, "x", info.param.k, "_r", o.rows, "_s", o.splits,
                               "_kt", o.k_tiles_per_stage, o.warpgroups == 4 ? "_wg4" : "",
                               o.square_waits > 0 ? absl::StrCat("_w", o.square_waits) : "",
                               o.square_tokens > 0 ? absl::StrCat("_t", o.square_tokens) : "",
                               o.square_grid == 2 ? "_persistent" : "",
                               o.square_blocks > 0 ? absl::StrCat(o.square_blocks) : "",
                               o.square_store == 2 ? "_tma_store" : "",
                               o.band_rows > 0 ? absl::StrCat("_band", o.band_rows) : "",
                               info.param.nvfp4_a ? "_nvfp4_a" : "");
                         });

TEST(SwapAbArgsTest, RejectsWhatItCannotRun) {
  alignas(16) char buf[16];
  EXPECT_TRUE(SwapAbRuns(buf, 64, buf, 16, 64).ok());
  EXPECT_EQ(SwapAbRuns(buf, 65, buf, 16, 64).message(),
            "the swap-AB kernel takes 1 to 64 rows of A; got 65");
  EXPECT_TRUE(SwapAbRuns(buf, 65, buf, 16, 64, SwapAbPath::kWgmma).ok());
  EXPECT_EQ(SwapAbRuns(buf, kSwapAbWgmmaMaxM + 1, buf, 16, 64, SwapAbPath::kWgmma).message(),
            absl::StrCat("the swap-AB kernel takes 1 to ", kSwapAbWgmmaMaxM, " rows of A; got ",
                         kSwapAbWgmmaMaxM + 1));
  EXPECT_EQ(SwapAbRuns(buf, 0, buf, 16, 64).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SwapAbRuns(buf, 1, buf, 24, 64).message(),
            "the swap-AB kernel needs a weight of rows % 16 == 0 and K % 64 == 0, below 2^30; "
            "got [24, 64]");
  EXPECT_EQ(SwapAbRuns(buf + 2, 1, buf, 16, 64).message(),
            "the swap-AB kernel needs A and the weight 16-byte aligned");
  EXPECT_EQ(LaunchSwapAbNvfp4(buf, 1, buf, 1.0f, 16, 64, nullptr, nullptr).message(),
            "the swap-AB kernel needs C");
  EXPECT_EQ(LaunchSwapAbInt8(buf, 1, buf, 16, 48, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  if (ResolveSwapAbPath(SwapAbPath::kWgmma).ok()) {
    float* c = reinterpret_cast<float*>(buf);
    EXPECT_EQ(
        LaunchSwapAbInt8(buf, 1, buf, 16, 64, c, nullptr, {SwapAbPath::kWgmma, 0, 64, 0}).message(),
        "the swap-AB wgmma kernel takes 128 or 256 rows a block; got 64");
    EXPECT_EQ(
        LaunchSwapAbInt8(buf, 1, buf, 16, 64, c, nullptr, {SwapAbPath::kWgmma, 0, 0, 3}).message(),
        "the swap-AB wgmma kernel splits K 1, 2, 4 or 8 ways; got 3");
    EXPECT_EQ(
        LaunchSwapAbInt8(buf, 1, buf, 16, 64, c, nullptr, {SwapAbPath::kWgmma, 0, 128, 0, 4, 4})
            .message(),
        "the swap-AB wgmma kernel's 4 warpgroups take 256 rows a block and 4 K tiles a stage");
    EXPECT_EQ(LaunchSwapAbInt8(buf, 1, buf, 16, 64, c, nullptr, {SwapAbPath::kWgmma, 0, 0, 0, 0, 3})
                  .message(),
              "the swap-AB wgmma kernel takes 2 or 4 consumer warpgroups; got 3");
    SwapAbOptions bands{SwapAbPath::kWgmma};
    bands.band_rows = 128;  // 16 rows: not a multiple of 128
    EXPECT_EQ(LaunchSwapAbInt8(buf, 1, buf, 16, 64, c, nullptr, bands).message(),
              "the swap-AB wgmma kernel reads bands of 256 rows, or of 128 with 128 rows a block "
              "and rows % 128 == 0; got bands of 128");
    SwapAbOptions waits{SwapAbPath::kWgmma};
    waits.square_waits = 3;
    EXPECT_EQ(LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, waits).message(),
              "the square swap-AB kernel waits 1 or 2 times a K tile; got 3");
    SwapAbOptions tokens{SwapAbPath::kWgmma};
    tokens.square_tokens = 192;
    EXPECT_EQ(LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, tokens).message(),
              "the square swap-AB kernel takes blocks of 128 or 256 tokens; got 192");
    EXPECT_EQ(LaunchSwapAbNvfp4xNvfp4(buf, buf, 1.0f, 65, buf, 1.0f, 16, 64, c, nullptr, nullptr)
                  .message(),
              "the NVFP4 x NVFP4 swap-AB kernel needs a_half: Nvfp4HalfBytes(m, k) bytes of device "
              "memory, 16-byte aligned");
    SwapAbOptions grid{SwapAbPath::kWgmma};
    grid.square_grid = 3;
    EXPECT_EQ(LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, grid).message(),
              "the square swap-AB grid is 1 (a block an item) or 2 (persistent); got 3");
    SwapAbOptions blocks{SwapAbPath::kWgmma};
    blocks.square_blocks = -1;
    EXPECT_EQ(
        LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, blocks).message(),
        "the square swap-AB kernel's persistent blocks are at least 1 (0: one an SM); got -1");
    SwapAbOptions store{SwapAbPath::kWgmma};
    store.square_store = 3;
    EXPECT_EQ(LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, store).message(),
              "the square swap-AB epilogue stores from registers (1) or by TMA (2); got 3");
    store.square_store = 2;
    store.square_waits = 2;
    EXPECT_EQ(LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, store).message(),
              "the square swap-AB kernel's TMA-stored epilogue takes one wait a K tile");
    SwapAbOptions four{SwapAbPath::kWgmma};
    four.warpgroups = 4;
    EXPECT_EQ(LaunchSwapAbInt8(buf, 65, buf, 16, 64, c, nullptr, four).message(),
              "the square swap-AB kernel takes 2 consumer warpgroups; got 4");
  }
}

// The upload's relayout on the device: in place, the host prepack's bytes exactly (bands
// of 256 rows and a short last one, codes and scales in their own regions); and the
// unpack back to the uploaded bytes.
TEST(SwapAbRelayoutTest, DeviceRelayoutMatchesTheHostPrepackBothWays) {
  SKIP_WITHOUT_GPU();
  for (QuantFormat format : {QuantFormat::kNvfp4, QuantFormat::kInt8}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{16, 64}, {560, 192}, {256, 1024}}) {
      SCOPED_TRACE(absl::StrCat(QuantFormatName(format), " ", n, " x ", k));
      const bool nvfp4 = format == QuantFormat::kNvfp4;
      std::mt19937 rng(static_cast<uint32_t>(n * 7 + k));
      std::vector<uint8_t> data(nvfp4 ? n * k / 2 : n * k), scales(nvfp4 ? n * k / 16 : 4 * n);
      for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
      for (uint8_t& b : scales) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> expected(data.size() + scales.size());
      ASSERT_TRUE((nvfp4 ? PrepackNvfp4SwapAb(data.data(), scales.data(), n, k, expected.data())
                         : PrepackInt8SwapAb(reinterpret_cast<const int8_t*>(data.data()),
                                             scales.data(), n, k, expected.data()))
                      .ok());
      DeviceBuffer d_data = Upload(data.data(), data.size());
      DeviceBuffer d_scales = Upload(scales.data(), scales.size());
      const size_t scratch_bytes = SwapAbRelayoutScratchBytes(format, n, k);
      DeviceBuffer scratch = *DeviceBuffer::Allocate(scratch_bytes);
      ASSERT_TRUE(RelayoutSwapAbInPlace(format, n, k, d_data.get(), d_scales.get(), scratch.get(),
                                        scratch_bytes, nullptr)
                      .ok());
      std::vector<uint8_t> got_data(data.size()), got_scales(scales.size());
      ASSERT_EQ(cudaMemcpy(got_data.data(), d_data.get(), data.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(
          cudaMemcpy(got_scales.data(), d_scales.get(), scales.size(), cudaMemcpyDeviceToHost),
          cudaSuccess);
      EXPECT_TRUE(std::equal(got_data.begin(), got_data.end(), expected.begin()));
      EXPECT_TRUE(std::equal(got_scales.begin(), got_scales.end(), expected.begin() + data.size()));

      DeviceBuffer out_data = *DeviceBuffer::Allocate(data.size());
      DeviceBuffer out_scales = *DeviceBuffer::Allocate(scales.size());
      ASSERT_EQ(cudaMemcpy(out_scales.get(), scales.data(), scales.size(), cudaMemcpyHostToDevice),
                cudaSuccess);  // INT8's row scales are not the unpack's
      ASSERT_TRUE(UnpackSwapAb(format, n, k, d_data.get(), d_scales.get(), out_data.get(),
                               out_scales.get(), nullptr)
                      .ok());
      ASSERT_EQ(cudaMemcpy(got_data.data(), out_data.get(), data.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(
          cudaMemcpy(got_scales.data(), out_scales.get(), scales.size(), cudaMemcpyDeviceToHost),
          cudaSuccess);
      EXPECT_EQ(got_data, data);
      EXPECT_EQ(got_scales, scales);
    }
  }
  uint8_t* none = nullptr;
  EXPECT_EQ(
      RelayoutSwapAbInPlace(QuantFormat::kNvfp4, 16, 64, none, none, none, 16, nullptr).message(),
      "the relayout of [16, 64] needs 576 bytes of scratch; got 16");
  EXPECT_EQ(UnpackSwapAb(QuantFormat::kInt8, 24, 64, none, none, none, none, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmd::gpu
