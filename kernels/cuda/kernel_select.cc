// SelectKernel: which registered variant runs a problem. Kept apart from the registry
// and the kernels so the policy can change (and be tested) on its own.
//
// The policy, from gemm-bench on the H200 (docs/KERNELS.md):
//   * Big tiles win whenever they fill the machine: a tile of the largest variant per
//     multiprocessor (or more) → the largest tile.
//   * Otherwise the next smaller tile, which makes more blocks.
//   * Small M*N with long K (skinny, small batched) → the `_splitk` variant, which
//     splits K until there are enough blocks; for M <= 16 on the FP32 path, the
//     16-row tile wastes the least work.
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/tiled_gemm.h"

namespace gemmd::gpu {
namespace {

int64_t Tiles(const GemmProblem& p, int64_t tm, int64_t tn) {
  return ((p.m + tm - 1) / tm) * ((p.n + tn - 1) / tn) * p.batch;
}

}  // namespace

absl::StatusOr<const GpuGemmKernel*> SelectKernel(const GemmProblem& problem,
                                                  const DeviceCaps& caps,
                                                  const KernelRegistry& registry) {
  const int64_t sms = caps.sm_count > 0 ? caps.sm_count : 1;
  // Preference lists, best first for the problem's size class.
  std::string_view order[3];
  if (problem.precision == Precision::kFp32) {
    if (Tiles(problem, 128, 128) >= sms) {
      order[0] = "sgemm_simt_128x128x8";
      order[1] = "sgemm_simt_64x64x8_splitk";
      order[2] = "sgemm_simt_16x128x16_splitk";
    } else if (problem.m <= 16) {
      order[0] = "sgemm_simt_16x128x16_splitk";
      order[1] = "sgemm_simt_64x64x8_splitk";
      order[2] = "sgemm_simt_128x128x8";
    } else {
      order[0] = "sgemm_simt_64x64x8_splitk";
      order[1] = "sgemm_simt_128x128x8";
      order[2] = "sgemm_simt_16x128x16_splitk";
    }
  } else {
    const bool bf16 = problem.a_type == DataType::kBFloat16;
    static const std::string kNames[2][3] = {
        {"hgemm_wmma_128x256x32_s3", "hgemm_wmma_128x128x32_s4",
         "hgemm_wmma_64x64x32_s4_splitk"},
        {"bgemm_wmma_128x256x32_s3", "bgemm_wmma_128x128x32_s4",
         "bgemm_wmma_64x64x32_s4_splitk"}};
    const std::string* names = kNames[bf16 ? 1 : 0];
    if (Tiles(problem, 128, 256) >= sms) {
      order[0] = names[0];
      order[1] = names[1];
      order[2] = names[2];
    } else if (Tiles(problem, 128, 128) >= sms) {
      order[0] = names[1];
      order[1] = names[2];
      order[2] = names[0];
    } else {
      order[0] = names[2];
      order[1] = names[1];
      order[2] = names[0];
    }
  }

  absl::Status first_error;
  for (std::string_view name : order) {
    const GpuGemmKernel* kernel = registry.Find(name);
    if (kernel == nullptr) continue;
    if (caps.compute_capability < kernel->min_compute_capability()) {
      if (first_error.ok()) {
        first_error = absl::FailedPreconditionError(absl::StrCat(
            internal::Sv(PrecisionName(problem.precision)), " kernels need compute capability ",
            kernel->min_compute_capability(), "; device ", caps.device, " (", caps.name,
            ") has ", caps.compute_capability));
      }
      continue;
    }
    const absl::Status status = kernel->Check(problem);
    if (status.ok()) return kernel;
    if (absl::IsInvalidArgument(status)) return status;
    if (first_error.ok()) first_error = status;
  }
  // Fall back to anything registered that can do it (e.g. variants added later).
  for (const GpuGemmKernel* kernel : registry.kernels()) {
    if (caps.compute_capability >= kernel->min_compute_capability() &&
        kernel->CanImplement(problem)) {
      return kernel;
    }
  }
  if (first_error.ok()) {
    first_error = absl::FailedPreconditionError(
        absl::StrCat("no GPU kernel for ", internal::Sv(PrecisionName(problem.precision)), " with ",
                     internal::Sv(DataTypeName(problem.a_type)), " inputs and ",
                     internal::Sv(DataTypeName(problem.c_type)), " output"));
  }
  return absl::FailedPreconditionError(first_error.message());
}

}  // namespace gemmd::gpu
