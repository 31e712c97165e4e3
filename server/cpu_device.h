// The CPU backend as a Device: OpenBLAS for FP32, faithful FP16-tensor emulation (see
// kernels/cpu_gemm.h). Operands already live in host memory, so copies take no time.
// A batch runs its jobs one after another straight from the request buffers: packing
// them would only add copies (OpenBLAS gains nothing from one bigger call). Weight-only
// QuantizedMatmul runs from the packed weight (kernels/cpu_quantized_gemm.h); with a
// quantized A the server dequantizes both operands and submits the FP32 GEMM.
#ifndef GEMMD_SERVER_CPU_DEVICE_H_
#define GEMMD_SERVER_CPU_DEVICE_H_

#include "kernels/cpu_gemm.h"
#include "server/device.h"

namespace gemmd {

class CpuDevice : public Device {
 public:
  explicit CpuDevice(int index);

  const DeviceDescription& description() const override { return description_; }
  std::vector<KernelDescription> Kernels() const override;
  absl::StatusOr<std::string> SelectKernel(const GemmProblem& problem,
                                           absl::string_view forced_kernel) const override;
  absl::StatusOr<std::string> SelectQuantizedKernel(
      const QuantizedOperands& operands, absl::string_view forced_kernel) const override;
  std::vector<std::string> QuantizedKernels() const override;
  absl::Status RunBatch(const Batch& batch, int lane, BatchRun* run) override;
  bool healthy() const override { return true; }

 private:
  absl::Status RunWeightOnly(const Job& job);

  DeviceDescription description_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_CPU_DEVICE_H_
