// The CUDA backend's selection: which registered variant runs a problem (SelectKernel,
// dense) or a QuantizedMatmul (SelectQuantizedKernel). Kept apart from the registry and
// the kernels so the policy can change (and be tested) on its own.
//
// Dense:
// The policy is a small cost model fitted to gemm-bench on the H200 (docs/KERNELS.md):
// for every variant that can run the problem, estimate
//
//   time = waves * (flops of one block's tile / rate of one block slot + kWaveLatency)
//
// where a "slot" is one resident block (blocks per SM x SMs), waves = ceil(blocks /
// slots), a block's flops count its whole tile (padding past M/N is wasted work) and its
// K slice (split-K shortens it), and the slot rate is the variant's measured full-machine
// throughput divided by its slots. The latency term charges each wave a fixed cost
// (pipeline fill, epilogue), which is what makes huge tiles lose on tiny problems; the
// operand packing a variant needs first (conversion, padding, a transposed copy) is
// charged as memory traffic. The cheapest estimate wins. Each variant's profile is part of its registration
// (GpuGemmKernel::cost_profile).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/quantized/quantized_kernels.h"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu {
namespace {

// The rates are the profiles' (measured on the H200, 132 SMs): only their ratios and the
// occupancy matter for the choice.
constexpr double kProfiledSms = 132.0;
constexpr double kWaveLatencyS = 3e-6;

double EstimateSeconds(const GpuGemmKernel& kernel, const GemmProblem& problem,
                       const DeviceCaps& caps) {
  const LaunchGeometry g = kernel.Geometry(problem);
  if (g.blocks == 0) return 0.0;
  const CostProfile prof = kernel.cost_profile();
  const double sms = caps.sm_count > 0 ? caps.sm_count : kProfiledSms;
  const double slots = sms * prof.blocks_per_sm;
  const double slot_rate = prof.tflops * 1e12 / (kProfiledSms * prof.blocks_per_sm);
  const double block_flops = 2.0 * g.tile_m * g.tile_n * std::max<int64_t>(g.k_per_split, 1);
  const double waves = std::ceil(static_cast<double>(g.blocks) / slots);
  double seconds = waves * (block_flops / slot_rate + kWaveLatencyS);
  if (g.pack_bytes > 0) {
    // The packer reads about as much as it writes, in a launch of its own.
    seconds += 2.0 * g.pack_bytes / 2.5e12 + kWaveLatencyS;
  }
  if (g.splits > 1) {
    // The reduction reads splits partial tiles and writes C once (~2.5 TB/s effective).
    seconds += (g.splits + 1.0) * problem.batch * problem.m * problem.n * 4.0 / 2.5e12 +
               kWaveLatencyS;
  }
  return seconds;
}

}  // namespace

absl::StatusOr<const GpuGemmKernel*> SelectKernel(const GemmProblem& problem,
                                                  const DeviceCaps& caps,
                                                  const KernelRegistry& registry) {
  // A planned row block (GemmProblem::plan_m) gets the whole product's kernel.
  GemmProblem planned = problem;
  planned.m = problem.PlanM();
  planned.plan_m = 0;
  const GpuGemmKernel* best = nullptr;
  double best_seconds = std::numeric_limits<double>::infinity();
  absl::Status first_error;
  for (const GpuGemmKernel* kernel : registry.kernels()) {
    if (kernel->precision() != problem.precision) continue;
    const absl::Status status = kernel->Check(problem);
    if (absl::IsInvalidArgument(status)) return status;
    if (!status.ok()) {
      if (first_error.ok()) first_error = status;
      continue;
    }
    if (!kernel->RunsOn(caps.compute_capability)) {
      if (first_error.ok()) {
        first_error = absl::FailedPreconditionError(absl::StrCat(
            internal::Sv(PrecisionName(problem.precision)), " kernels need compute capability ",
            kernel->min_compute_capability(), "; device ", caps.device, " (", caps.name,
            ") has ", caps.compute_capability));
      }
      continue;
    }
    const double seconds = EstimateSeconds(*kernel, planned, caps);
    if (seconds < best_seconds) {
      best_seconds = seconds;
      best = kernel;
    }
  }
  if (best != nullptr) return best;
  if (first_error.ok()) {
    first_error = absl::FailedPreconditionError(absl::StrCat(
        "no GPU kernel for ", internal::Sv(PrecisionName(problem.precision)), " with ",
        internal::Sv(DataTypeName(problem.a_type)), " inputs and ",
        internal::Sv(DataTypeName(problem.c_type)), " output"));
  }
  return absl::FailedPreconditionError(first_error.message());
}

// Quantized. The skinny kernel streams B once at memory speed: it wins up to M =
// kSkinnyPreferredMaxM whatever A is (a quantized A is dequantized on the host first),
// and FP16 A against NVFP4 B up to its own limit (kSkinnyQuantizedMaxM), where the square
// FP16 x NVFP4 kernel's 128-row tiles are mostly empty. Larger M goes to the square
// (tensor-core) kernels when they take the operands: the same format on both sides, or
// FP16 x NVFP4, with the K alignment they need; up to the skinny limit the skinny kernel
// takes the rest; beyond it, none (the host dequantizes). Within the skinny family the
// path is ChooseSkinnyPath's (quant_gemm.h). Ahead of all of them, a weight kept in the
// swap-AB layout goes to the swap-AB kernels where they take the call, and from
// kSwapAbRepackMinM rows so does a canonical one where the wgmma swap-AB kernel runs (FP16
// A, or NVFP4 A against NVFP4 B). Measurements: docs/KERNELS.md.
namespace {

constexpr int64_t kSkinnyPreferredMaxM = 16;

// From this many rows of A a canonical weight goes to the swap-AB wgmma kernel on a copy
// the launch packs into its workspace: the copy reads and writes the weight once, against
// a GEMM of at least 2 x 256 x n x k flops.
constexpr int64_t kSwapAbRepackMinM = 256;

// The first kernel of `family` for B's format that runs `q` here (registry order:
// preferred first).
const QuantizedGemmKernel* FirstOf(QuantizedFamily family, const QuantizedOperands& q,
                                   const DeviceCaps& caps, const KernelRegistry& registry) {
  for (const QuantizedGemmKernel* k : registry.quantized()) {
    if (k->family() == family && k->format() == q.b.format &&
        k->RunsOn(caps.compute_capability) && k->Check(q, caps).ok()) {
      return k;
    }
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<const QuantizedGemmKernel*> SelectQuantizedKernel(const QuantizedOperands& q,
                                                                 const DeviceCaps& caps,
                                                                 const KernelRegistry& registry) {
  // A weight the store re-laid out for the swap-AB kernels goes to them where they take
  // the call, and so does a canonical one from kSwapAbRepackMinM rows (packed into the
  // workspace); any other kernel gets a re-laid-out weight unpacked into its workspace (the
  // device's launch).
  if (q.b.layout == WeightLayout::kSwapAb || q.m >= kSwapAbRepackMinM) {
    if (const QuantizedGemmKernel* k = FirstOf(QuantizedFamily::kSwapAb, q, caps, registry)) {
      return k;
    }
  }
  const DeviceQuantizedWeight b = PlacedWeight(q.b, q.n, q.k);
  const bool skinny_takes =
      caps.compute_capability >= 80 && CheckSkinnyOperands(DenseA(q), q.m, b).ok();
  const auto skinny = [&]() -> absl::StatusOr<const QuantizedGemmKernel*> {
    const absl::StatusOr<SkinnyPath> path = ChooseSkinnyPath(kArenaAligned, DenseA(q), q.m, b);
    if (!path.ok()) return path.status();
    return registry.FindQuantized(SkinnyKernelName(q.b.format, *path));
  };
  const bool fp16_x_nvfp4 = !q.a.has_value() && q.a_dense_type == DataType::kFloat16 &&
                            q.b.format == QuantFormat::kNvfp4;
  if (skinny_takes && (q.m <= kSkinnyPreferredMaxM || fp16_x_nvfp4)) return skinny();
  if (const QuantizedGemmKernel* k = FirstOf(QuantizedFamily::kSquare, q, caps, registry)) {
    return k;
  }
  if (const QuantizedGemmKernel* k = FirstOf(QuantizedFamily::kSquareFp16A, q, caps, registry)) {
    return k;
  }
  if (skinny_takes) return skinny();
  return nullptr;
}

absl::StatusOr<const QuantizedGemmKernel*> ForceQuantizedKernel(std::string_view name,
                                                                const QuantizedOperands& q,
                                                                const DeviceCaps& caps,
                                                                const KernelRegistry& registry) {
  const QuantizedGemmKernel* kernel = registry.FindQuantized(name);
  if (kernel == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no quantized GPU kernel named '", internal::Sv(name), "'"));
  }
  if (kernel->format() != q.b.format) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", internal::Sv(name), " decodes ", QuantFormatName(kernel->format()),
                     " weights; b is ", QuantFormatName(q.b.format)));
  }
  if (!kernel->RunsOn(caps.compute_capability)) {
    return absl::FailedPreconditionError(
        absl::StrCat(internal::Sv(name), " does not run on compute capability ",
                     caps.compute_capability, " (device ", caps.device, ", ", caps.name, ")"));
  }
  if (absl::Status s = kernel->Check(q, caps); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", internal::Sv(name), ": ", s.message()));
  }
  return kernel;
}

}  // namespace gemmd::gpu
