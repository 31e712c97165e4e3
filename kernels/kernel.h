// What every kernel of a catalogue is, whatever the backend: a name a request can force,
// which RPC's operands it takes, and the arithmetic it does. The CPU kernels
// (cpu/cpu_kernels.h) and the CUDA ones (cuda/gpu_gemm.h, cuda/quantized/quantized_kernels.h)
// derive from it with their own contract (can it run this, workspace, launch); the server
// keeps the `const Kernel*` chosen for a launch (the server's KernelCatalogue::Choose)
// until the request is answered.
#ifndef GEMMD_KERNELS_KERNEL_H_
#define GEMMD_KERNELS_KERNEL_H_

#include <cstdint>
#include <string_view>

#include "kernels/gemm_problem.h"
#include "kernels/quantized_operands.h"

namespace gemmd {

// The operands a kernel multiplies: dense tensors (Matmul; a QuantizedMatmul that the
// host dequantizes first) or packed quantized ones (QuantizedMatmul).
enum class KernelInput { kDense, kQuantized };

class Kernel {
 public:
  virtual ~Kernel() = default;

  // Catalogue key, e.g. "sgemm_simt_128x128x8". Unique across both inputs.
  virtual std::string_view name() const = 0;
  virtual KernelInput input() const = 0;
  // Dense: FP32 or FP16_TENSOR arithmetic. Quantized: kFp32 (an FP32 result).
  virtual Precision precision() const = 0;
  // Lowest CUDA compute capability (major * 10 + minor); 0 on the CPU.
  virtual int min_compute_capability() const = 0;
  // Host memory it allocates while it runs `q` (beyond the operands and C), which the
  // server counts against its memory cap.
  virtual int64_t HostWorkspaceBytes(const QuantizedOperands& /*q*/) const { return 0; }
};

}  // namespace gemmd

#endif  // GEMMD_KERNELS_KERNEL_H_
