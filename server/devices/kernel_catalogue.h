// A backend's kernels as the service sees them: what ServerInfo lists, and the one
// decision of which kernel runs a launch (Choose): for a request at admission, and for a
// stack of requests against one resident weight when its launch forms. Every device of a
// server is of one backend, so its catalogue chooses for all of them. The kernels
// themselves live in kernels/ (cpu/cpu_kernels.h, cuda/gpu_gemm.h,
// cuda/quantized/quantized_kernels.h); a job carries the chosen `const Kernel*` to the
// device, which runs it without looking anything up, and back in its result.
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

// A backend's answer for a QuantizedMatmul (SelectQuantized): a quantized kernel that
// takes the packed operands (a quantized A dequantized on the host first when `dense_a`),
// or none: the host path.
struct QuantizedChoice {
  const Kernel* kernel = nullptr;
  bool dense_a = false;
};

// How a launch runs.
enum class KernelPath {
  kDense,     // a Matmul on a dense kernel
  kPacked,    // a QuantizedMatmul on a quantized kernel, from its packed operands
  kDenseA,    // the same, its quantized A dequantized on the host first (the kernel reads A dense)
  kHost,      // a QuantizedMatmul dequantized on the host into the FP32 GEMM (a dense kernel)
};

struct KernelChoice {
  const Kernel* kernel = nullptr;  // never null in a choice returned
  KernelPath path = KernelPath::kDense;
};

class KernelCatalogue {
 public:
  virtual ~KernelCatalogue() = default;

  // Every kernel this backend can run, Matmul ones first.
  virtual std::vector<KernelDescription> Kernels() const = 0;

  // The one decision: the kernel and path for `problem` (a Matmul's; for a QuantizedMatmul
  // the FP32 equivalent, C = A * B^T, which the host path runs) and, for a
  // QuantizedMatmul, its packed operands `quantized` (null for a Matmul). `forced` is the
  // name a request gave, "" for the backend's choice; a QuantizedMatmul may force a
  // Matmul kernel, which means the host path. FAILED_PRECONDITION saying why for a name
  // this backend has under neither RPC (the message lists the kernels; a client's name
  // is shown capped and escaped) or only under the other, or when no kernel here (or not
  // the forced one) runs the request; INVALID_ARGUMENT for a malformed problem.
  absl::StatusOr<KernelChoice> Choose(const GemmProblem& problem,
                                      const QuantizedOperands* quantized,
                                      std::string_view forced) const;

  // The backend's own selection, which Choose calls once the name is checked.
  // The kernel for a Matmul: `forced` (a dense kernel of Kernels()) or, when empty, the
  // backend's choice. FAILED_PRECONDITION saying why when no kernel here (or not the
  // forced one) runs `problem`; INVALID_ARGUMENT for a malformed one.
  virtual absl::StatusOr<const Kernel*> Select(const GemmProblem& problem,
                                               std::string_view forced) const = 0;
  // The quantized kernel for a QuantizedMatmul: `forced` (a quantized kernel of
  // Kernels()) or, when empty, the backend's choice; no kernel means the host path.
  // FAILED_PRECONDITION, saying why, when the forced kernel cannot run these operands.
  virtual absl::StatusOr<QuantizedChoice> SelectQuantized(const QuantizedOperands& q,
                                                          std::string_view forced) const = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_KERNEL_CATALOGUE_H_
