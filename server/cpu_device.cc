#include "server/cpu_device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "kernels/cpu_gemm.h"

namespace gemmd {

CpuDevice::CpuDevice(int index) {
  description_.index = index;
  description_.kind = "cpu";
  description_.threads = CpuGemmThreads();
  description_.name =
      absl::StrCat("cpu:", index, " (OpenBLAS, ", description_.threads, " threads)");
}

std::vector<KernelDescription> CpuDevice::Kernels() const {
  return {{kCpuSgemmKernel, Precision::kFp32, ""}, {kCpuTensorKernel, Precision::kFp16Tensor, ""}};
}

absl::StatusOr<std::string> CpuDevice::SelectKernel(const GemmProblem& problem,
                                                    absl::string_view forced_kernel) const {
  const std::string natural = CpuKernelName(problem.precision);
  if (forced_kernel.empty() || forced_kernel == natural) return natural;
  for (const KernelDescription& k : Kernels()) {
    if (k.name == forced_kernel) {
      return absl::FailedPreconditionError(
          absl::StrCat("kernel ", forced_kernel, " computes ", PrecisionName(k.precision),
                       " but the request asks for ", PrecisionName(problem.precision)));
    }
  }
  std::vector<std::string> names;
  for (const KernelDescription& k : Kernels()) names.push_back(k.name);
  return absl::FailedPreconditionError(
      absl::StrCat("no kernel named '", forced_kernel,
                   "' on this server; available: ", absl::StrJoin(names, ", ")));
}

absl::Status CpuDevice::RunBatch(const Batch& batch, int /*lane*/, BatchRun* run) {
  const absl::Time start = absl::Now();
  run->kernel = CpuKernelName(batch.problem.precision);
  absl::Status status = absl::OkStatus();
  for (const std::unique_ptr<Job>& job : batch.jobs) {
    if (job->quantized != nullptr) {  // RunsQuantized() is false: the server dequantizes
      status = absl::InternalError("the CPU backend runs no packed quantized operands");
      break;
    }
    status = CpuGemm(job->problem, job->operands);
    if (!status.ok()) break;
  }
  run->copy_in = absl::ZeroDuration();
  run->compute = absl::Now() - start;
  run->copy_out = absl::ZeroDuration();
  return status;
}

}  // namespace gemmd
