// The CPU backend's kernels: its three kernels as catalogue entries (what each
// runs, the host workspace it needs, running it on host operands) and the CPU's
// selection. Names are what responses and ServerInfo report.
//
//   cpu_sgemm_openblas               Matmul, FP32 (OpenBLAS sgemm)
//   cpu_hgemm_emulated_openblas      Matmul, FP16_TENSOR emulated (cpu_gemm.h)
//   cpu_weight_only_sgemm_openblas   QuantizedMatmul with a dense A (cpu_quantized_gemm.h)
#ifndef GEMMD_KERNELS_CPU_CPU_KERNELS_H_
#define GEMMD_KERNELS_CPU_CPU_KERNELS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"
#include "kernels/kernel.h"
#include "kernels/quantized_operands.h"

namespace gemmd {

class CpuKernel : public Kernel {
 public:
  int min_compute_capability() const final { return 0; }

  // OK when it runs this Matmul problem / these QuantizedMatmul operands; else
  // FAILED_PRECONDITION saying why (a kernel of the other input says so too).
  virtual absl::Status Check(const GemmProblem& problem) const = 0;
  virtual absl::Status Check(const QuantizedOperands& q) const = 0;
  // Runs on host memory: the dense problem, or C [m, n] FP32 = q's product.
  virtual absl::Status Run(const GemmProblem& problem, const GemmOperands& host) const = 0;
  virtual absl::Status Run(const QuantizedOperands& q, float* c) const = 0;
};

// The catalogue, in a fixed order (Matmul kernels first).
const std::vector<const CpuKernel*>& CpuKernels();
// nullptr for a name the CPU does not have.
const CpuKernel* FindCpuKernel(std::string_view name);

// The kernel for a Matmul: the one of its precision.
const CpuKernel& SelectCpuKernel(const GemmProblem& problem);
// The kernel for a QuantizedMatmul: the weight-only one for a dense A; nullptr for a
// quantized A (the host dequantizes both and runs the FP32 GEMM).
const CpuKernel* SelectCpuQuantizedKernel(const QuantizedOperands& q);

}  // namespace gemmd

#endif  // GEMMD_KERNELS_CPU_CPU_KERNELS_H_
