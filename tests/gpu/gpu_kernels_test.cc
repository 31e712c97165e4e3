// GPU kernel tests: every registered variant against the FP64 CPU reference, on shapes
// that straddle tile edges, with NaN-poisoned outputs, guard words after C, seeded random
// operands (the seed is printed on failure; GEMM_TEST_SEED overrides it), both
// transposes, batches with broadcast operands, alpha/beta and in-place C. Also the
// registry, selection and error paths. Without a GPU the device tests are skipped
// (visibly) and the host-only ones still run.
//
// Tolerances (docs/ARCHITECTURE.md, "Numerics"; relative Frobenius error vs FP64 on the
// stored operands):
//   FP32 precision            <= 1e-5
//   FP16_TENSOR, FP32/FP16 in <= 1e-3 (FP32 inputs rounded to FP16 count as error)
//   FP16_TENSOR, BF16 in      <= 1e-3 as well: BF16 inputs are exact in the reference
//                                and products are exact in FP32, so only the FP32
//                                accumulation differs (measured ~1e-6).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/common/cuda_raii.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/gemm_problem.h"
#include "kernels/reference_gemm.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace gemmd::gpu {
namespace {

#define ASSERT_CUDA(expr)                                                     \
  do {                                                                        \
    const cudaError_t err_ = (expr);                                          \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (false)

std::string Sv(std::string_view s) { return std::string(s); }

struct Shape {
  const char* name;
  int64_t batch, m, n, k;
  bool ta, tb;
  float alpha = 1.0f;
  float beta = 0.0f;
  int64_t stride_a = -1;  // 0 = broadcast
  int64_t stride_b = -1;
  bool in_place = false;   // c_in == c_out
  int64_t a_offset = 0;    // elements: a misaligned base pointer for A
};

// Sizes straddle the tiles (16/64/128/256 rows and columns, K steps of 8/16/32).
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {"1x1x1", 1, 1, 1, 1, false, false},
      {"15x17x13_nt", 1, 15, 17, 13, false, true},
      {"17x15x31_tn", 1, 17, 15, 31, true, false},
      {"127x129x65_tt", 1, 127, 129, 65, true, true},
      {"129x127x257_nn", 1, 129, 127, 257, false, false},
      {"128x256x64_nn_exact", 1, 128, 256, 64, false, false},
      {"256x256x256_tn_exact", 1, 256, 256, 256, true, false},
      {"1000x1000x40_nt", 1, 1000, 1000, 40, false, true},
      {"129x1000x1000_nn", 1, 129, 1000, 1000, false, false},
      {"70x90x8_small_k", 1, 70, 90, 8, false, false},
      {"33x47x1_k1_tt", 1, 33, 47, 1, true, true},
      {"b3_65x70x100_tt_alpha_beta", 3, 65, 70, 100, true, true, 0.5f, -1.5f},
      {"b4_33x40x64_bcast_b", 4, 33, 40, 64, false, false, 1.0f, 0.0f, -1, 0},
      {"b3_40x33x48_nt_bcast_a_beta", 3, 40, 33, 48, false, true, 2.0f, 0.25f, 0, -1},
      {"b5_17x129x31_tn", 5, 17, 129, 31, true, false},
      {"130x66x40_in_place_beta", 1, 130, 66, 40, false, false, 1.0f, 2.0f, -1, -1, true},
      {"1x300x2049_skinny", 1, 1, 300, 2049, false, false},
      {"16x256x4096_skinny_tn", 1, 16, 256, 4096, true, false},
      {"64x130x3000_skinny_nt_alpha_beta", 1, 64, 130, 3000, false, true, -1.0f, 0.5f},
      {"64x64x64_misaligned_a", 1, 64, 64, 64, false, false, 1.0f, 0.0f, -1, -1, false, 1},
      {"b2_96x80x512_misaligned_a_tt", 2, 96, 80, 512, true, true, 1.0f, 0.0f, -1, -1, false,
       3},
      // K = 0: C = beta * C, A and B are never touched.
      {"9x10x0_k0_beta", 1, 9, 10, 0, false, false, 2.0f, 0.5f},
      // More items than grid.z allows (65535): the launcher splits the batch.
      {"b65537_2x3x4_batch_chunks", 65537, 2, 3, 4, false, true, 1.0f, 0.0f},
  };
  return shapes;
}

struct Param {
  std::string kernel;
  DataType input;
  Shape shape;
};

// Readable parameters in gtest output ("kernel/FLOAT16/127x129x65_tt").
void PrintTo(const Param& p, std::ostream* os) {
  *os << p.kernel << "/" << DataTypeName(p.input) << "/" << p.shape.name;
}

std::vector<DataType> InputTypes(const GpuGemmKernel& k) {
  switch (k.operand_type()) {
    case DataType::kFloat32:
      return {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
    case DataType::kFloat16:
      return {DataType::kFloat32, DataType::kFloat16};
    case DataType::kFloat64:
      return {DataType::kFloat64};
    default:
      return {DataType::kBFloat16};
  }
}

GemmProblem MakeProblem(const GpuGemmKernel& kernel, DataType input, const Shape& s) {
  GemmProblem p;
  p.batch = s.batch;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.transpose_a = s.ta;
  p.transpose_b = s.tb;
  p.a_type = p.b_type = input;
  p.c_type = kernel.precision() == Precision::kFp64 ? DataType::kFloat64 : DataType::kFloat32;
  p.precision = kernel.precision();
  p.alpha = s.alpha;
  p.beta = s.beta;
  p.batch_stride_a = s.stride_a;
  p.batch_stride_b = s.stride_b;
  return p;
}

// Every (variant, input type, shape) the variant can implement. Widening FP16/BF16 into
// the FP32 SIMT kernels uses the same packer as misalignment, so a few shapes suffice.
std::vector<Param> AllParams() {
  std::vector<Param> params;
  for (const GpuGemmKernel* k : KernelRegistry::Global().kernels()) {
    for (DataType input : InputTypes(*k)) {
      const bool widening = k->operand_type() == DataType::kFloat32 && input != DataType::kFloat32;
      for (const Shape& s : Shapes()) {
        if (widening && std::string(s.name) != "127x129x65_tt" &&
            std::string(s.name) != "b3_65x70x100_tt_alpha_beta" &&
            std::string(s.name) != "1x300x2049_skinny") {
          continue;
        }
        if (k->CanImplement(MakeProblem(*k, input, s))) params.push_back({Sv(k->name()), input, s});
      }
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat(info.param.kernel, "_", Sv(DataTypeName(info.param.input)), "_",
                      info.param.shape.name);
}

uint64_t SeedFor(const std::string& name) {
  return testing::TestSeed(20261130) ^ std::hash<std::string>{}(name);
}

// FP64 against the long-double reference, K up to 4096 here (docs/ARCHITECTURE.md).
double Tolerance(const GpuGemmKernel& k) {
  switch (k.precision()) {
    case Precision::kFp32:
      return 1e-5;
    case Precision::kFp64:
      return 1e-13;
    case Precision::kFp16Tensor:
      break;
  }
  return 1e-3;
}

class KernelCorrectnessTest : public ::testing::TestWithParam<Param> {};

TEST_P(KernelCorrectnessTest, MatchesFp64Reference) {
  SKIP_WITHOUT_GPU();
  const Param& param = GetParam();
  const GpuGemmKernel* kernel = KernelRegistry::Global().Find(param.kernel);
  ASSERT_NE(kernel, nullptr);
  const GemmProblem p = MakeProblem(*kernel, param.input, param.shape);
  const std::string name = absl::StrCat(param.kernel, "/", Sv(DataTypeName(param.input)), "/",
                                        param.shape.name);
  const uint64_t seed = SeedFor(name);
  SCOPED_TRACE(absl::StrCat("seed=", seed, " (GEMM_TEST_SEED=", testing::TestSeed(20261130),
                            " xor hash of '", name, "')"));
  std::mt19937_64 rng(seed);

  const size_t in_bytes = DataTypeSize(param.input);
  const int64_t off = param.shape.a_offset;
  const std::string a = testing::RandomBytes(param.input, p.ElementsA() + off, rng);
  const std::string b = testing::RandomBytes(param.input, p.ElementsB(), rng);
  const std::string c_in =
      p.beta != 0.0 ? testing::RandomBytes(p.c_type, p.ElementsCIn(), rng) : std::string();
  constexpr int64_t kGuard = 64;
  const int64_t c_elems = p.ElementsC();
  const size_t c_bytes = DataTypeSize(p.c_type);

  auto d_a = DeviceBuffer::Allocate(a.size());
  auto d_b = DeviceBuffer::Allocate(b.size());
  auto d_c = DeviceBuffer::Allocate((c_elems + kGuard) * c_bytes);
  auto d_cin = DeviceBuffer::Allocate(c_in.size());
  ASSERT_TRUE(d_a.ok() && d_b.ok() && d_c.ok() && d_cin.ok());
  if (!a.empty()) ASSERT_CUDA(cudaMemcpy(d_a->get(), a.data(), a.size(), cudaMemcpyHostToDevice));
  if (!b.empty()) ASSERT_CUDA(cudaMemcpy(d_b->get(), b.data(), b.size(), cudaMemcpyHostToDevice));
  // Poison C and its guard words with NaN (all bits set): unwritten outputs fail.
  ASSERT_CUDA(cudaMemset(d_c->get(), 0xFF, (c_elems + kGuard) * c_bytes));
  if (!c_in.empty()) {
    void* dst = param.shape.in_place ? d_c->get() : d_cin->get();
    ASSERT_CUDA(cudaMemcpy(dst, c_in.data(), c_in.size(), cudaMemcpyHostToDevice));
  }

  GemmOperands dev;
  dev.a = static_cast<const char*>(d_a->get()) + off * in_bytes;
  dev.b = d_b->get();
  dev.c_out = d_c->get();
  dev.c_in = c_in.empty() ? nullptr : (param.shape.in_place ? d_c->get() : d_cin->get());

  const size_t ws_bytes = kernel->WorkspaceBytes(p, dev);
  auto ws = DeviceBuffer::Allocate(ws_bytes);
  ASSERT_TRUE(ws.ok());
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();

  const absl::Status status = kernel->Launch(p, dev, ws->get(), ws_bytes, stream->get());
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_CUDA(cudaStreamSynchronize(stream->get()));
  ASSERT_CUDA(cudaGetLastError());

  std::string c((c_elems + kGuard) * c_bytes, '\0');
  ASSERT_CUDA(cudaMemcpy(c.data(), d_c->get(), c.size(), cudaMemcpyDeviceToHost));
  for (size_t i = c_elems * c_bytes; i < c.size(); ++i) {
    ASSERT_EQ(static_cast<unsigned char>(c[i]), 0xFFu)
        << "write past the end of C at element " << i / c_bytes;
  }

  GemmOperands host;
  host.a = a.data() + off * in_bytes;
  host.b = b.data();
  host.c_in = c_in.empty() ? nullptr : c_in.data();
  const std::vector<double> ref = ReferenceGemm(p, host);
  int64_t nans = 0;
  for (int64_t i = 0; i < c_elems; ++i) nans += std::isnan(LoadAsDouble(c.data(), p.c_type, i));
  EXPECT_EQ(nans, 0) << "unwritten (NaN) outputs";
  const double err = RelativeError(ref.data(), c.data(), p.c_type, c_elems);
  EXPECT_LE(err, Tolerance(*kernel)) << kernel->name() << " on " << param.shape.name;
  RecordProperty("rel_error", absl::StrCat(err));
}

INSTANTIATE_TEST_SUITE_P(Registry, KernelCorrectnessTest, ::testing::ValuesIn(AllParams()),
                         ParamName);

// ---- Registry, selection and error paths -------------------------------------------------

DeviceCaps FakeHopper() {
  DeviceCaps caps;
  caps.name = "fake sm_90";
  caps.compute_capability = 90;
  caps.sm_count = 132;
  return caps;
}

GemmProblem Square(int64_t n, Precision precision, DataType input) {
  GemmProblem p;
  p.m = p.n = p.k = n;
  p.precision = precision;
  p.a_type = p.b_type = input;
  return p;
}

// ---- Row plans (GemmProblem::plan_m) -----------------------------------------------------

// A product of 1300 rows whose K split depends on M for the split-K variants (a 512-row
// block alone would split K more finely than the whole product does). FP64's K ends in a
// partial K tile, which some DGEMM variants take first in both their launches (the full
// tiles' and the edge tiles').
GemmProblem PlannedWhole(const GpuGemmKernel& kernel) {
  GemmProblem p;
  p.m = 1300;
  p.n = 264;
  p.k = kernel.precision() == Precision::kFp64 ? 1534 : 1536;
  p.a_type = p.b_type = kernel.operand_type();
  p.c_type = kernel.precision() == Precision::kFp64 ? DataType::kFloat64 : DataType::kFloat32;
  p.precision = kernel.precision();
  p.alpha = 0.75f;
  return p;
}

// Rows [row0, row0 + rows) of `whole`, planned as its rows.
GemmProblem Block(const GemmProblem& whole, int64_t row0, int64_t rows) {
  GemmProblem block = whole;
  block.m = rows;
  block.plan_m = whole.m;
  block.plan_row0 = row0;
  return block;
}

// Host only: a planned block gets its whole product's kernel and K split.
TEST(RowPlanTest, ABlockIsChosenAndSplitAsItsWholeProduct) {
  for (const GpuGemmKernel* k : KernelRegistry::Global().kernels()) {
    const GemmProblem whole = PlannedWhole(*k);
    if (!k->CanImplement(whole)) continue;
    const GemmProblem block = Block(whole, 512, 512);
    EXPECT_EQ(k->Geometry(block).splits, k->Geometry(whole).splits) << k->name();
    EXPECT_EQ(k->Geometry(block).k_per_split, k->Geometry(whole).k_per_split) << k->name();
    if (k->name() == "sgemm_simt_64x64x8_splitk") {
      // 105 tiles split K 5 ways; 40 alone would split it 6 ways: the plan is what matters.
      GemmProblem unplanned = block;
      unplanned.plan_m = 0;
      EXPECT_EQ(k->Geometry(whole).splits, 5);
      EXPECT_EQ(k->Geometry(unplanned).splits, 6);
    }
    auto chosen_whole = SelectKernel(whole, FakeHopper());
    auto chosen_block = SelectKernel(block, FakeHopper());
    ASSERT_TRUE(chosen_whole.ok() && chosen_block.ok());
    EXPECT_EQ(*chosen_block, *chosen_whole) << k->name();
  }
}

// Every variant computes a planned block's rows bit for bit as in the whole product's
// launch: 1300 rows as blocks of 512, 512 and 276.
TEST(RowPlanTest, EveryVariantsBlocksAreTheWholeProductsRowsBitForBit) {
  SKIP_WITHOUT_GPU();
  auto stream = CudaStream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (const GpuGemmKernel* k : KernelRegistry::Global().kernels()) {
    const GemmProblem whole = PlannedWhole(*k);
    if (!k->CanImplement(whole)) continue;
    int device = 0;
    cudaDeviceProp prop{};
    ASSERT_CUDA(cudaGetDevice(&device));
    ASSERT_CUDA(cudaGetDeviceProperties(&prop, device));
    if (!k->RunsOn(prop.major * 10 + prop.minor)) continue;
    SCOPED_TRACE(Sv(k->name()));
    std::mt19937_64 rng(testing::TestSeed(20261205));
    const size_t in_bytes = DataTypeSize(whole.a_type);
    const std::string a = testing::RandomBytes(whole.a_type, whole.ElementsA(), rng);
    const std::string b = testing::RandomBytes(whole.b_type, whole.ElementsB(), rng);
    auto d_a = DeviceBuffer::Allocate(a.size());
    auto d_b = DeviceBuffer::Allocate(b.size());
    const size_t c_bytes = DataTypeSize(whole.c_type);
    auto d_whole = DeviceBuffer::Allocate(whole.ElementsC() * c_bytes);
    auto d_blocks = DeviceBuffer::Allocate(whole.ElementsC() * c_bytes);
    ASSERT_TRUE(d_a.ok() && d_b.ok() && d_whole.ok() && d_blocks.ok());
    ASSERT_CUDA(cudaMemcpy(d_a->get(), a.data(), a.size(), cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemcpy(d_b->get(), b.data(), b.size(), cudaMemcpyHostToDevice));
    const auto run = [&](const GemmProblem& p, int64_t row0, void* c) {
      GemmOperands ops;
      ops.a = static_cast<const char*>(d_a->get()) + row0 * whole.k * in_bytes;
      ops.b = d_b->get();
      ops.c_out = static_cast<char*>(c) + row0 * whole.n * c_bytes;
      const size_t ws_bytes = k->WorkspaceBytes(p, ops);
      auto ws = DeviceBuffer::Allocate(ws_bytes);
      ASSERT_TRUE(ws.ok());
      const absl::Status s = k->Launch(p, ops, ws->get(), ws_bytes, stream->get());
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_CUDA(cudaStreamSynchronize(stream->get()));
    };
    run(whole, 0, d_whole->get());
    for (int64_t row0 = 0; row0 < whole.m; row0 += 512) {
      run(Block(whole, row0, std::min<int64_t>(512, whole.m - row0)), row0, d_blocks->get());
    }
    std::string c_whole(whole.ElementsC() * c_bytes, '\0'), c_blocks(c_whole.size(), '\0');
    ASSERT_CUDA(cudaMemcpy(c_whole.data(), d_whole->get(), c_whole.size(), cudaMemcpyDeviceToHost));
    ASSERT_CUDA(
        cudaMemcpy(c_blocks.data(), d_blocks->get(), c_blocks.size(), cudaMemcpyDeviceToHost));
    int64_t differing = 0;
    for (size_t i = 0; i < c_whole.size(); i += c_bytes) {
      differing += std::memcmp(&c_whole[i], &c_blocks[i], c_bytes) != 0 ? 1 : 0;
    }
    EXPECT_EQ(differing, 0) << "of " << whole.ElementsC() << " elements";
  }
}

TEST(KernelRegistryTest, NamesAreUniqueAndFindable) {
  const auto& kernels = KernelRegistry::Global().kernels();
  ASSERT_GE(kernels.size(), 5u);
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_FALSE(kernels[i]->name().empty());
    EXPECT_EQ(KernelRegistry::Global().Find(kernels[i]->name()), kernels[i]);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(kernels[i]->name(), kernels[j]->name());
  }
  EXPECT_EQ(DescribeKernels().size(), kernels.size());
  // Both precisions are covered, with at least two FP32 SIMT variants.
  int fp32 = 0, tensor = 0;
  for (const auto* k : kernels) (k->precision() == Precision::kFp32 ? fp32 : tensor)++;
  EXPECT_GE(fp32, 2);
  EXPECT_GE(tensor, 2);
}

// The cost model reads each variant's profile from its registration: none is missing.
TEST(KernelRegistryTest, EveryVariantHasACostProfile) {
  for (const GpuGemmKernel* k : KernelRegistry::Global().kernels()) {
    const CostProfile profile = k->cost_profile();
    EXPECT_GT(profile.tflops, 0.0) << k->name();
    EXPECT_GE(profile.blocks_per_sm, 1) << k->name();
  }
}

TEST(KernelRegistryTest, ForcingAnUnknownNameIsNotFound) {
  const auto result =
      ForceKernel("no_such_kernel", Square(64, Precision::kFp32, DataType::kFloat32), FakeHopper());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << result.status();
}

TEST(KernelRegistryTest, ForcingAVariantThatCannotImplementFails) {
  // An FP32 SIMT kernel asked for a tensor-core problem.
  auto result = ForceKernel("sgemm_simt_128x128x8",
                            Square(64, Precision::kFp16Tensor, DataType::kFloat16), FakeHopper());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  // A BF16 kernel asked for FP16 inputs.
  result = ForceKernel("bgemm_wmma_128x128x32_s4",
                       Square(64, Precision::kFp16Tensor, DataType::kFloat16), FakeHopper());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  // FP16 output is not implemented.
  GemmProblem p = Square(64, Precision::kFp16Tensor, DataType::kFloat16);
  p.c_type = DataType::kFloat16;
  result = ForceKernel("hgemm_wmma_128x128x32_s4", p, FakeHopper());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  // A device too old for it.
  DeviceCaps volta = FakeHopper();
  volta.compute_capability = 70;
  result = ForceKernel("hgemm_wmma_128x128x32_s4",
                       Square(64, Precision::kFp16Tensor, DataType::kFloat16), volta);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  // And one that fits works.
  result = ForceKernel("hgemm_wmma_128x128x32_s4",
                       Square(64, Precision::kFp16Tensor, DataType::kFloat16), FakeHopper());
  EXPECT_TRUE(result.ok()) << result.status();
}

TEST(KernelSelectTest, PicksAVariantOfTheRequestedPrecision) {
  struct Case {
    int64_t batch, m, n, k;
    Precision precision;
    DataType input;
  };
  const Case cases[] = {
      {1, 4096, 4096, 4096, Precision::kFp32, DataType::kFloat32},
      {1, 1, 8192, 8192, Precision::kFp32, DataType::kFloat32},
      {1, 64, 8192, 8192, Precision::kFp32, DataType::kFloat32},
      {64, 256, 256, 256, Precision::kFp32, DataType::kFloat32},
      {1, 4096, 4096, 4096, Precision::kFp16Tensor, DataType::kFloat16},
      {1, 4096, 4096, 4096, Precision::kFp16Tensor, DataType::kFloat32},
      {1, 4096, 4096, 4096, Precision::kFp16Tensor, DataType::kBFloat16},
      {1, 16, 8192, 8192, Precision::kFp16Tensor, DataType::kFloat16},
      {1024, 64, 64, 64, Precision::kFp16Tensor, DataType::kFloat16},
      {1, 17, 15, 31, Precision::kFp16Tensor, DataType::kBFloat16},
  };
  for (const Case& c : cases) {
    GemmProblem p = Square(1, c.precision, c.input);
    p.batch = c.batch;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    auto kernel = SelectKernel(p, FakeHopper());
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_EQ((*kernel)->precision(), c.precision) << (*kernel)->name();
    EXPECT_TRUE((*kernel)->CanImplement(p)) << (*kernel)->name();
  }
}

TEST(KernelSelectTest, ReportsWhatCannotBeDone) {
  GemmProblem p = Square(64, Precision::kFp16Tensor, DataType::kFloat16);
  p.c_type = DataType::kBFloat16;
  EXPECT_EQ(SelectKernel(p, FakeHopper()).status().code(), absl::StatusCode::kFailedPrecondition);
  p = Square(64, Precision::kFp32, DataType::kFloat32);
  p.m = -1;
  EXPECT_EQ(SelectKernel(p, FakeHopper()).status().code(), absl::StatusCode::kInvalidArgument);
  DeviceCaps turing = FakeHopper();
  turing.compute_capability = 75;
  EXPECT_EQ(SelectKernel(Square(64, Precision::kFp16Tensor, DataType::kFloat16), turing)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(KernelSelectTest, GeometryAndChoicesFollowTheProblemShape) {
  // Skinny problems split K (the only way to occupy 100+ multiprocessors with 64 tiles).
  GemmProblem skinny = Square(8192, Precision::kFp16Tensor, DataType::kFloat16);
  skinny.m = 16;
  auto kernel = SelectKernel(skinny, FakeHopper());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_TRUE((*kernel)->splits_k()) << (*kernel)->name();
  const LaunchGeometry g = (*kernel)->Geometry(skinny);
  EXPECT_GT(g.splits, 1);
  EXPECT_GE(g.blocks, 100);
  EXPECT_EQ(g.k_per_split % g.tile_k, 0);
  EXPECT_GT((*kernel)->WorkspaceBytes(skinny), 0u);
  // Large square problems take the big tile, and a workspace only for what the tile
  // cannot read as stored: B stored [N, K] (transpose_b) is read in place; B stored
  // [K, N] is, by a K-major (wgmma) tile, read from a transposed FP16 copy.
  GemmProblem big = Square(4096, Precision::kFp16Tensor, DataType::kFloat16);
  big.transpose_b = true;
  kernel = SelectKernel(big, FakeHopper());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ((*kernel)->Geometry(big).splits, 1);
  EXPECT_EQ((*kernel)->Geometry(big).tile_m, 128);
  EXPECT_EQ((*kernel)->WorkspaceBytes(big), 0u);
  big.transpose_b = false;
  kernel = SelectKernel(big, FakeHopper());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const size_t transposed_b = size_t{4096} * 4096 * 2;
  EXPECT_EQ((*kernel)->WorkspaceBytes(big),
            (*kernel)->Geometry(big).pack_bytes > 0 ? transposed_b : 0u)
      << (*kernel)->name();
  // A batch of small products is not worth a transposed copy of its B (the copy's
  // traffic is charged): 64 x 256^3 FP16 keeps a tile that reads B as stored.
  GemmProblem batched = Square(256, Precision::kFp16Tensor, DataType::kFloat16);
  batched.batch = 64;
  kernel = SelectKernel(batched, FakeHopper());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ((*kernel)->Geometry(batched).pack_bytes, 0) << (*kernel)->name();
  // Tiny batched problems take a small tile.
  GemmProblem tiny = Square(64, Precision::kFp32, DataType::kFloat32);
  tiny.batch = 1024;
  kernel = SelectKernel(tiny, FakeHopper());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_LE((*kernel)->Geometry(tiny).tile_m, 64) << (*kernel)->name();
  // Something it cannot do has no geometry.
  GemmProblem fp16_out = big;
  fp16_out.c_type = DataType::kFloat16;
  EXPECT_EQ((*kernel)->Geometry(fp16_out).blocks, 0);
}

TEST(CudaStatusTest, NamesExpressionLocationAndError) {
  const absl::Status s = CudaErrorToStatus(cudaErrorInvalidValue, "cudaFoo(x)", "f.cc", 12);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  const std::string msg(s.message());
  EXPECT_NE(msg.find("cudaFoo(x)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f.cc:12"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
  EXPECT_NE(msg.find("device"), std::string::npos) << msg;
  EXPECT_TRUE(CudaErrorToStatus(cudaSuccess, "x", "f", 1).ok());
}

TEST(KernelLaunchTest, RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  // FP32 inputs on the tensor path are converted into the workspace: it is required.
  GemmProblem p = Square(256, Precision::kFp16Tensor, DataType::kFloat32);
  const GpuGemmKernel* kernel = KernelRegistry::Global().Find("hgemm_wmma_128x128x32_s4");
  ASSERT_NE(kernel, nullptr);
  const size_t need = kernel->WorkspaceBytes(p);
  EXPECT_GE(need, size_t{2 * 256 * 256 * 2});
  auto a = DeviceBuffer::Allocate(256 * 256 * 4);
  auto b = DeviceBuffer::Allocate(256 * 256 * 4);
  auto c = DeviceBuffer::Allocate(256 * 256 * 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  GemmOperands ops{a->get(), b->get(), nullptr, c->get()};
  absl::Status s = kernel->Launch(p, ops, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // beta != 0 needs c_in.
  p = Square(256, Precision::kFp16Tensor, DataType::kFloat16);
  p.beta = 1.0f;
  s = kernel->Launch(p, ops, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // A wrong precision is a precondition failure, not a crash.
  p = Square(256, Precision::kFp32, DataType::kFloat32);
  s = kernel->Launch(p, ops, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // Empty problems are fine and touch nothing.
  p = Square(256, Precision::kFp16Tensor, DataType::kFloat16);
  p.m = 0;
  EXPECT_TRUE(kernel->Launch(p, ops, nullptr, 0, nullptr).ok());
  ASSERT_CUDA(cudaDeviceSynchronize());
}

TEST(KernelLaunchTest, QueryDeviceCapsDescribesTheGpu) {
  SKIP_WITHOUT_GPU();
  auto caps = QueryDeviceCaps(0);
  ASSERT_TRUE(caps.ok()) << caps.status();
  EXPECT_GT(caps->sm_count, 0);
  EXPECT_GE(caps->compute_capability, 50);
  EXPECT_FALSE(caps->name.empty());
  EXPECT_EQ(QueryDeviceCaps(9999).status().code(), absl::StatusCode::kInternal);
  std::cout << "[ device   ] " << caps->name << ", sm_" << caps->compute_capability << ", "
            << caps->sm_count << " SMs\n";
}

}  // namespace
}  // namespace gemmd::gpu
