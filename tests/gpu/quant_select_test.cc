// Which quantized kernel serves a QuantizedMatmul on a GPU (gpu::SelectQuantizedKernel,
// kernels/cuda/kernel_select.cc), and what each catalogue entry says when it cannot run
// the operands. Selection asks the device (occupancy of the streaming path): those tests
// skip without a GPU; the entries' own checks run anywhere.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/quantized/quant_square.h"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/cuda/quantized/quantized_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace gemmd::gpu {
namespace {

QuantizedOperands Operands(int64_t m, int64_t k, std::optional<QuantFormat> a, QuantFormat b,
                           DataType a_dense = DataType::kFloat16, int64_t n = 4096) {
  QuantizedOperands q;
  q.m = m;
  q.n = n;
  q.k = k;
  if (a) q.a = QuantizedOperand{*a, {}, {}, 1.0f};
  q.a_dense_type = a_dense;
  q.b.format = b;
  return q;
}

DeviceCaps Hopper() {
  DeviceCaps caps;
  caps.name = "H200 (test)";
  caps.compute_capability = 90;
  caps.sm_count = 132;
  caps.shared_memory_per_block_optin_bytes = 227 * 1024;
  return caps;
}

// The family SelectQuantizedKernel picks on this machine's GPU 0; "host" for none.
std::string Family(const QuantizedOperands& q) {
  const absl::StatusOr<DeviceCaps> caps = QueryDeviceCaps(0);
  EXPECT_TRUE(caps.ok()) << caps.status();
  const absl::StatusOr<const QuantizedGemmKernel*> k = SelectQuantizedKernel(q, *caps);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok() || *k == nullptr) return "host";
  switch ((*k)->family()) {
    case QuantizedFamily::kSkinny:
      return "skinny";
    case QuantizedFamily::kSquare:
      return "square";
    case QuantizedFamily::kSquareFp16A:
      return "square_fp16_a";
    case QuantizedFamily::kSwapAb:
      return "swapab";
  }
  return "?";
}

TEST(QuantSelectTest, FewRowsGoToTheSkinnyKernelWhateverA) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(Family(Operands(1, 8192, std::nullopt, QuantFormat::kNvfp4)), "skinny");
  EXPECT_EQ(Family(Operands(16, 8192, QuantFormat::kInt8, QuantFormat::kInt8)), "skinny");
  EXPECT_EQ(Family(Operands(16, 48, std::nullopt, QuantFormat::kNvfp4, DataType::kFloat32)),
            "skinny");
}

// FP16 x NVFP4 stays with the skinny kernel up to 64 rows, then the square kernel.
TEST(QuantSelectTest, Fp16ActivationsAgainstNvfp4StaySkinnyUpTo64Rows) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(Family(Operands(17, 8192, std::nullopt, QuantFormat::kNvfp4)), "skinny");
  EXPECT_EQ(Family(Operands(64, 8192, std::nullopt, QuantFormat::kNvfp4)), "skinny");
  EXPECT_EQ(Family(Operands(65, 8192, std::nullopt, QuantFormat::kNvfp4)), "square_fp16_a");
  // Not for a quantized A: past 16 rows it keeps the square kernel.
  EXPECT_EQ(Family(Operands(17, 4096, QuantFormat::kNvfp4, QuantFormat::kNvfp4)), "square");
}

// Larger problems: from 256 rows of FP16 A (or NVFP4 A against NVFP4 B) the swap-AB wgmma
// kernel on a packed copy of the weight where it runs; else the square kernels where they
// take the operands.
TEST(QuantSelectTest, LargerProblemsGoToTheSquareKernelsWhereTheyTakeTheOperands) {
  SKIP_WITHOUT_GPU();
  const bool wgmma = ResolveSwapAbPath(SwapAbPath::kWgmma).ok();
  EXPECT_EQ(Family(Operands(17, 4096, QuantFormat::kInt8, QuantFormat::kInt8)), "square");
  EXPECT_EQ(Family(Operands(255, 4096, QuantFormat::kNvfp4, QuantFormat::kNvfp4)), "square");
  EXPECT_EQ(Family(Operands(255, 4096, std::nullopt, QuantFormat::kNvfp4)), "square_fp16_a");
  EXPECT_EQ(Family(Operands(256, 4096, QuantFormat::kNvfp4, QuantFormat::kNvfp4)),
            wgmma ? "swapab" : "square");
  EXPECT_EQ(Family(Operands(4096, 4096, std::nullopt, QuantFormat::kNvfp4)),
            wgmma ? "swapab" : "square_fp16_a");
  EXPECT_EQ(Family(Operands(4096, 4096, std::nullopt, QuantFormat::kInt8)),
            wgmma ? "swapab" : "host");
  EXPECT_EQ(Family(Operands(4096, 4096, QuantFormat::kInt8, QuantFormat::kInt8)), "square");
  // NVFP4 K % 32 != 0, INT8 K % 16 != 0, mixed formats: skinny up to 64 rows ...
  EXPECT_EQ(Family(Operands(64, 48, QuantFormat::kNvfp4, QuantFormat::kNvfp4)), "skinny");
  EXPECT_EQ(Family(Operands(40, 100, std::nullopt, QuantFormat::kInt8)), "skinny");
  EXPECT_EQ(Family(Operands(64, 4096, QuantFormat::kInt8, QuantFormat::kNvfp4)), "skinny");
  // ... BF16 activations too ...
  EXPECT_EQ(Family(Operands(1, 4096, std::nullopt, QuantFormat::kNvfp4, DataType::kBFloat16)),
            "skinny");
  EXPECT_EQ(Family(Operands(64, 4096, std::nullopt, QuantFormat::kInt8, DataType::kBFloat16)),
            "skinny");
  // ... and the host beyond that.
  EXPECT_EQ(Family(Operands(65, 48, QuantFormat::kNvfp4, QuantFormat::kNvfp4)), "host");
  EXPECT_EQ(Family(Operands(255, 4096, std::nullopt, QuantFormat::kInt8)), "host");
  EXPECT_EQ(Family(Operands(65, 4096, std::nullopt, QuantFormat::kNvfp4, DataType::kBFloat16)),
            "host");
}

// Within the skinny family: the ring up to 8 FP16 rows, the streaming path beyond where it
// fills the GPU, the register path for the rest (FP32 A, a small N).
TEST(QuantSelectTest, TheSkinnyPathIsItsOwnKernel) {
  SKIP_WITHOUT_GPU();
  const absl::StatusOr<DeviceCaps> caps = QueryDeviceCaps(0);
  ASSERT_TRUE(caps.ok()) << caps.status();
  auto name = [&](const QuantizedOperands& q) {
    const absl::StatusOr<const QuantizedGemmKernel*> k = SelectQuantizedKernel(q, *caps);
    return k.ok() && *k != nullptr ? std::string((*k)->name()) : std::string("none");
  };
  EXPECT_EQ(name(Operands(1, 8192, std::nullopt, QuantFormat::kNvfp4, DataType::kFloat16, 8192)),
            "skinny_nvfp4_ring_mma16816");
  EXPECT_EQ(name(Operands(4, 8192, std::nullopt, QuantFormat::kInt8, DataType::kFloat32, 8192)),
            "skinny_int8_regs_mma16816");
  EXPECT_EQ(name(Operands(48, 8192, std::nullopt, QuantFormat::kNvfp4, DataType::kFloat16, 8192)),
            "skinny_nvfp4_stream_mma16816");
  EXPECT_EQ(name(Operands(32, 8192, std::nullopt, QuantFormat::kInt8, DataType::kFloat16, 256)),
            "skinny_int8_regs_mma16816");  // 2 row blocks would leave the GPU idle
}

TEST(QuantSelectTest, EntriesSayWhyTheyCannotRunTheOperands) {
  const KernelRegistry& registry = KernelRegistry::Global();
  const QuantizedGemmKernel* regs = registry.FindQuantized("skinny_nvfp4_regs_mma16816");
  const QuantizedGemmKernel* ring = registry.FindQuantized("skinny_int8_ring_mma16816");
  const QuantizedGemmKernel* square = registry.FindQuantized("qgemm_nvfp4_mma_128x128x64_s4");
  const QuantizedGemmKernel* fp16a = registry.FindQuantized("qgemm_f16xnvfp4_mma_128x128x64_s3");
  ASSERT_NE(regs, nullptr);
  ASSERT_NE(ring, nullptr);
  ASSERT_NE(square, nullptr);
  ASSERT_NE(fp16a, nullptr);
  EXPECT_TRUE(regs->Check(Operands(64, 48, std::nullopt, QuantFormat::kNvfp4), Hopper()).ok());
  const absl::Status rows =
      regs->Check(Operands(65, 48, std::nullopt, QuantFormat::kNvfp4), Hopper());
  EXPECT_EQ(rows.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rows.message(), "skinny quantized GEMM takes M in [1, 64]; got 65");
  EXPECT_EQ(regs->Check(Operands(4, 64, std::nullopt, QuantFormat::kNvfp4, DataType::kInt8),
                        Hopper())
                .message(),
            "skinny quantized GEMM takes FLOAT16, FLOAT32 or BFLOAT16 activations, not INT8");
  EXPECT_EQ(ring->Check(Operands(9, 64, std::nullopt, QuantFormat::kInt8), Hopper()).message(),
            "the skinny ring takes FLOAT16 activations of 1-8 rows");
  EXPECT_EQ(square->Check(Operands(128, 48, QuantFormat::kNvfp4, QuantFormat::kNvfp4), Hopper())
                .message(),
            "A: NVFP4 K = 48 is not a multiple of 32 (the kernel copies 16-byte rows of packed "
            "codes)");
  EXPECT_EQ(square->Check(Operands(128, 64, QuantFormat::kInt8, QuantFormat::kNvfp4), Hopper())
                .message(),
            "the square kernel takes A and B quantized in the same format");
  EXPECT_EQ(fp16a->Check(Operands(128, 64, std::nullopt, QuantFormat::kNvfp4, DataType::kFloat32),
                         Hopper())
                .message(),
            "the FP16 x NVFP4 kernel takes a dense FLOAT16 A and an NVFP4 B");
  // A forced kernel of the other format says so.
  const absl::StatusOr<const QuantizedGemmKernel*> forced = ForceQuantizedKernel(
      "skinny_int8_regs_mma16816", Operands(4, 64, std::nullopt, QuantFormat::kNvfp4), Hopper());
  EXPECT_EQ(forced.status().message(),
            "kernel skinny_int8_regs_mma16816 decodes INT8 weights; b is NVFP4");
  EXPECT_EQ(ForceQuantizedKernel("sgemm_simt_128x128x8",
                                 Operands(4, 64, std::nullopt, QuantFormat::kNvfp4), Hopper())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// A weight kept in the swap-AB layout goes to the swap-AB kernels for FP16 A (mma.sync: up
// to 64 rows, wgmma: any); past that, or for other activations, to the kernels it would
// have gone to canonical (the launch unpacks it into their workspace).
TEST(QuantSelectTest, SwapAbWeightsGoToTheSwapAbKernelsForFp16Rows) {
  SKIP_WITHOUT_GPU();
  const auto swapab = [](QuantizedOperands q) {
    q.b.layout = WeightLayout::kSwapAb;
    return q;
  };
  const bool wgmma = ResolveSwapAbPath(SwapAbPath::kWgmma).ok();
  EXPECT_EQ(Family(swapab(Operands(1, 8192, std::nullopt, QuantFormat::kNvfp4))), "swapab");
  EXPECT_EQ(Family(swapab(Operands(64, 8192, std::nullopt, QuantFormat::kInt8))), "swapab");
  EXPECT_EQ(Family(swapab(Operands(65, 8192, std::nullopt, QuantFormat::kNvfp4))),
            wgmma ? "swapab" : "square_fp16_a");
  if (wgmma) {
    EXPECT_EQ(Family(swapab(Operands(4096, 8192, std::nullopt, QuantFormat::kInt8))), "swapab");
  }
  EXPECT_EQ(
      Family(swapab(Operands(16, 8192, std::nullopt, QuantFormat::kNvfp4, DataType::kBFloat16))),
      "skinny");
  EXPECT_EQ(Family(swapab(Operands(16, 8192, QuantFormat::kInt8, QuantFormat::kInt8))), "skinny");
}

TEST(QuantSelectTest, SwapAbEntriesSayWhyTheyCannotRunTheOperands) {
  const QuantizedGemmKernel* k = KernelRegistry::Global().FindQuantized("swapab_nvfp4_mma16816");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->b_layout(), WeightLayout::kSwapAb);
  QuantizedOperands q = Operands(16, 8192, std::nullopt, QuantFormat::kNvfp4);
  EXPECT_EQ(k->Check(q, Hopper()).message(),
            "swapab_nvfp4_mma16816 reads a resident weight kept in the swap-AB layout "
            "(--quantized_layout); this one is canonical");
  q.b.layout = WeightLayout::kSwapAb;
  EXPECT_TRUE(k->Check(q, Hopper()).ok());
  q.a_dense_type = DataType::kBFloat16;
  EXPECT_EQ(k->Check(q, Hopper()).message(), "swapab_nvfp4_mma16816 takes a dense FLOAT16 A");
  q = Operands(65, 8192, std::nullopt, QuantFormat::kNvfp4);
  q.b.layout = WeightLayout::kSwapAb;
  EXPECT_EQ(k->Check(q, Hopper()).code(), absl::StatusCode::kFailedPrecondition);
  q = Operands(16, 96, std::nullopt, QuantFormat::kNvfp4);
  q.b.layout = WeightLayout::kSwapAb;
  EXPECT_EQ(k->Check(q, Hopper()).code(), absl::StatusCode::kFailedPrecondition);
  // The wgmma entry for NVFP4 A reads A packed, and takes nothing else.
  if (const QuantizedGemmKernel* x =
          KernelRegistry::Global().FindQuantized("swapab_nvfp4xnvfp4_wgmma");
      x != nullptr) {
    EXPECT_TRUE(x->reads_packed_a());
    EXPECT_EQ(x->Check(Operands(256, 4096, std::nullopt, QuantFormat::kNvfp4), Hopper()).message(),
              "swapab_nvfp4xnvfp4_wgmma takes an NVFP4 A");
    EXPECT_TRUE(
        x->Check(Operands(256, 4096, QuantFormat::kNvfp4, QuantFormat::kNvfp4), Hopper()).ok());
  }
  DeviceCaps ampere_minus = Hopper();
  ampere_minus.compute_capability = 75;
  EXPECT_EQ(k->Check(q, ampere_minus).message(),
            "swapab_nvfp4_mma16816 needs compute capability 8.0 or later");
}

// Every distinct kernel has its own name, and the catalogue lists both kinds.
TEST(QuantSelectTest, TheCatalogueNamesEachQuantizedKernelOnce) {
  const KernelRegistry& registry = KernelRegistry::Global();
  std::vector<std::string> names;
  for (const QuantizedGemmKernel* k : registry.quantized()) names.emplace_back(k->name());
  for (const GpuGemmKernel* k : registry.kernels()) names.emplace_back(k->name());
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
  }
  for (const char* skinny :
       {"skinny_int8_ring_mma16816", "skinny_int8_regs_mma16816", "skinny_int8_stream_mma16816",
        "skinny_nvfp4_ring_mma16816", "skinny_nvfp4_regs_mma16816",
        "skinny_nvfp4_stream_mma16816"}) {
    EXPECT_NE(registry.FindQuantized(skinny), nullptr) << skinny;
  }
  for (const char* swapab : {"swapab_int8_mma16816", "swapab_nvfp4_mma16816"}) {
    EXPECT_NE(registry.FindQuantized(swapab), nullptr) << swapab;
  }
  EXPECT_EQ(registry.FindQuantized("swapab_nvfp4_wgmma") != nullptr, SwapAbWgmmaBuilt());
  EXPECT_EQ(registry.FindQuantized("swapab_nvfp4xnvfp4_wgmma") != nullptr, SwapAbWgmmaBuilt());
  EXPECT_EQ(registry.quantized().size(),
            (SquareWgmmaBuilt() ? 12u : 9u) + (SwapAbWgmmaBuilt() ? 5u : 2u));
}

}  // namespace
}  // namespace gemmd::gpu
