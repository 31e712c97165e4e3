#include "server/cpu_device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "kernels/cpu_gemm.h"
#include "kernels/cpu_quantized_gemm.h"

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

absl::StatusOr<std::string> CpuDevice::SelectQuantizedKernel(
    const QuantizedOperands& operands, absl::string_view forced_kernel) const {
  if (!forced_kernel.empty() && forced_kernel != kCpuWeightOnlyKernel) {
    return std::string();  // a dense kernel's name (or none): the host path decides
  }
  if (operands.a.has_value()) {
    if (forced_kernel.empty()) return std::string();  // both quantized: the host path
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel ", kCpuWeightOnlyKernel, " takes a dense A (weight-only quantization); a is ",
        QuantFormatName(operands.a->format)));
  }
  return std::string(kCpuWeightOnlyKernel);
}

std::vector<std::string> CpuDevice::QuantizedKernels() const { return {kCpuWeightOnlyKernel}; }

absl::Status CpuDevice::RunBatch(const Batch& batch, int /*lane*/, BatchRun* run) {
  const absl::Time start = absl::Now();
  run->kernel = CpuKernelName(batch.problem.precision);
  absl::Status status = absl::OkStatus();
  for (const std::unique_ptr<Job>& job : batch.jobs) {
    if (job->quantized != nullptr) {  // packed jobs come alone (never batched)
      run->kernel = kCpuWeightOnlyKernel;
      status = RunWeightOnly(*job);
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

absl::Status CpuDevice::RunWeightOnly(const Job& job) {
  const QuantizedOperands& q = *job.quantized;
  if (q.a.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kCpuWeightOnlyKernel, " takes a dense A; this job's A is quantized"));
  }
  if (job.operands.c_out == nullptr) {
    return absl::InvalidArgumentError("quantized job without a result buffer");
  }
  const PackedWeight b{q.b.format, q.b.data.data(), q.b.scales.data(), q.b.tensor_scale, q.n,
                       q.k};
  return CpuWeightOnlyGemm(q.a_dense.data(), q.a_dense_type, q.m, b,
                           static_cast<float*>(job.operands.c_out));
}

}  // namespace gemmd
