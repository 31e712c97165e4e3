// The CPU backend as a Device: OpenBLAS for FP32, faithful FP16-tensor emulation (see
// kernels/cpu_gemm.h). Operands already live in host memory, so copies take no time.
// A batch runs its jobs one after another straight from the request buffers: packing
// them would only add copies (OpenBLAS gains nothing from one bigger call).
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
  absl::Status RunBatch(const Batch& batch, int lane, BatchRun* run) override;
  bool healthy() const override { return true; }

 private:
  DeviceDescription description_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_CPU_DEVICE_H_
