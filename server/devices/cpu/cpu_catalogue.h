// The CPU backend's KernelCatalogue: the kernels of kernels/cpu/cpu_kernels.h, chosen by
// precision (Matmul) or, for a QuantizedMatmul, the weight-only kernel for a dense A and
// the host path for a quantized A.
#ifndef GEMMD_SERVER_DEVICES_CPU_CPU_CATALOGUE_H_
#define GEMMD_SERVER_DEVICES_CPU_CPU_CATALOGUE_H_

#include "server/devices/kernel_catalogue.h"

namespace gemmd {

class CpuCatalogue : public KernelCatalogue {
 public:
  std::vector<KernelDescription> Kernels() const override;
  absl::StatusOr<const Kernel*> Select(const GemmProblem& problem,
                                       std::string_view forced) const override;
  absl::StatusOr<QuantizedChoice> SelectQuantized(const QuantizedOperands& q,
                                                  std::string_view forced) const override;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CPU_CPU_CATALOGUE_H_
