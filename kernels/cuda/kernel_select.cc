// SelectKernel: which registered variant runs a problem. Kept apart from the registry
// and the kernels so the policy can change (and be tested) on its own.
//
// The policy is a small cost model fitted to gemm-bench on the H200 (docs/KERNELS.md):
// for every variant that can run the problem, estimate
//
//   time = waves * (flops of one block's tile / rate of one block slot + kWaveLatency)
//
// where a "slot" is one resident block (blocks per SM x SMs), waves = ceil(blocks /
// slots), a block's flops count its whole tile (padding past M/N is wasted work) and its
// K slice (split-K shortens it), and the slot rate is the variant's measured full-machine
// throughput divided by its slots. The latency term charges each wave a fixed cost
// (pipeline fill, epilogue), which is what makes huge tiles lose on tiny problems. The
// cheapest estimate wins. Variants missing from the table get a conservative profile.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/tiled_gemm.h"

namespace gemmd::gpu {
namespace {

struct Profile {
  std::string_view name;
  double tflops;      // H200, large square problem, median (gemm-bench 2026-11-30)
  int blocks_per_sm;  // resident blocks (registers / shared memory limit)
};

// Full-machine rates measured on the H200 (132 SMs); only their ratios and the
// occupancy matter for the choice.
constexpr Profile kProfiles[] = {
    {"sgemm_simt_128x128x8", 43.5, 2},
    {"sgemm_simt_64x64x8_splitk", 34.0, 4},
    {"sgemm_simt_16x128x16_splitk", 27.0, 4},
    {"hgemm_wmma_128x128x32_s4", 331.0, 2},
    {"hgemm_wmma_64x64x32_s4_splitk", 190.0, 4},
    {"bgemm_wmma_128x128x32_s4", 331.0, 2},
    {"bgemm_wmma_64x64x32_s4_splitk", 190.0, 4},
};
constexpr double kProfiledSms = 132.0;
constexpr double kWaveLatencyS = 3e-6;

Profile ProfileOf(std::string_view name, Precision precision) {
  for (const Profile& p : kProfiles) {
    if (p.name == name) return p;
  }
  return Profile{name, precision == Precision::kFp32 ? 20.0 : 150.0, 1};
}

double EstimateSeconds(const GpuGemmKernel& kernel, const GemmProblem& problem,
                       const DeviceCaps& caps) {
  const LaunchGeometry g = kernel.Geometry(problem);
  if (g.blocks == 0) return 0.0;
  const Profile prof = ProfileOf(kernel.name(), kernel.precision());
  const double sms = caps.sm_count > 0 ? caps.sm_count : kProfiledSms;
  const double slots = sms * prof.blocks_per_sm;
  const double slot_rate = prof.tflops * 1e12 / (kProfiledSms * prof.blocks_per_sm);
  const double block_flops = 2.0 * g.tile_m * g.tile_n * std::max<int64_t>(g.k_per_split, 1);
  const double waves = std::ceil(static_cast<double>(g.blocks) / slots);
  double seconds = waves * (block_flops / slot_rate + kWaveLatencyS);
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
    if (caps.compute_capability < kernel->min_compute_capability()) {
      if (first_error.ok()) {
        first_error = absl::FailedPreconditionError(absl::StrCat(
            internal::Sv(PrecisionName(problem.precision)), " kernels need compute capability ",
            kernel->min_compute_capability(), "; device ", caps.device, " (", caps.name,
            ") has ", caps.compute_capability));
      }
      continue;
    }
    const double seconds = EstimateSeconds(*kernel, problem, caps);
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

}  // namespace gemmd::gpu
