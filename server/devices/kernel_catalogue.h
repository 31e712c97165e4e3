// A backend's kernels as the service sees them: what ServerInfo lists, and the one
// choice per request, made at admission (every device of a server is of one backend, so
// its catalogue chooses for all of them). The kernels themselves live in kernels/
// (cpu_catalogue.h, cuda/gpu_gemm.h, cuda/quantized_kernels.h); a job carries the
// chosen `const Kernel*` to the device, which runs it without looking anything up.
#ifndef GEMMD_SERVER_DEVICES_KERNEL_CATALOGUE_H_
#define GEMMD_SERVER_DEVICES_KERNEL_CATALOGUE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "kernels/quantized_operands.h"

namespace gemmd {

struct KernelDescription {
  std::string name;
  KernelInput input = KernelInput::kDense;  // Matmul, or QuantizedMatmul
  Precision precision = Precision::kFp32;
  std::string min_compute_capability;  // "8.0"; "" on the CPU
};

// How a QuantizedMatmul runs: on `kernel` from its packed operands (a quantized A first
// dequantized on the host to FP32 when `dense_a`), or, with no kernel, dequantized on
// the host into the FP32 GEMM (Select on the FP32 problem).
struct QuantizedChoice {
  const Kernel* kernel = nullptr;
  bool dense_a = false;
};

class KernelCatalogue {
 public:
  virtual ~KernelCatalogue() = default;

  // Every kernel this backend can run, Matmul ones first.
  virtual std::vector<KernelDescription> Kernels() const = 0;

  // The kernel for a Matmul: `forced` (a dense kernel of Kernels(), see CheckKernelName)
  // or, when empty, the backend's choice. FAILED_PRECONDITION saying why when no kernel
  // here (or not the forced one) runs `problem`; INVALID_ARGUMENT for a malformed one.
  virtual absl::StatusOr<const Kernel*> Select(const GemmProblem& problem,
                                               std::string_view forced) const = 0;

  // The way a QuantizedMatmul runs. `forced` naming a dense kernel means the host path;
  // FAILED_PRECONDITION, saying why, when it names a quantized kernel that cannot run
  // these operands.
  virtual absl::StatusOr<QuantizedChoice> SelectQuantized(const QuantizedOperands& q,
                                                          std::string_view forced) const = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_KERNEL_CATALOGUE_H_
