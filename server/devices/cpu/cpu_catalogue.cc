#include "server/devices/cpu/cpu_catalogue.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_kernels.h"

namespace gemmd {

std::vector<KernelDescription> CpuCatalogue::Kernels() const {
  std::vector<KernelDescription> out;
  for (const CpuKernel* k : CpuKernels()) {
    out.push_back({std::string(k->name()), k->input(), k->precision(), ""});
  }
  return out;
}

absl::StatusOr<const Kernel*> CpuCatalogue::Select(const GemmProblem& problem,
                                                   std::string_view forced) const {
  if (forced.empty()) return &SelectCpuKernel(problem);
  const CpuKernel* kernel = FindCpuKernel(forced);
  if (kernel == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CPU kernel named '", std::string(forced), "'"));
  }
  if (absl::Status s = kernel->Check(problem); !s.ok()) return s;
  return kernel;
}

absl::StatusOr<QuantizedChoice> CpuCatalogue::SelectQuantized(const QuantizedOperands& q,
                                                              std::string_view forced) const {
  const CpuKernel* kernel = forced.empty() ? SelectCpuQuantizedKernel(q) : FindCpuKernel(forced);
  // None: the host dequantizes and runs the FP32 GEMM.
  if (kernel == nullptr) return QuantizedChoice();
  if (absl::Status s = kernel->Check(q); !s.ok()) return s;
  return QuantizedChoice{kernel, /*dense_a=*/false};
}

}  // namespace gemmd
