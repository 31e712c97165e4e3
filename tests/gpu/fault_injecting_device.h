// A Device wrapper that makes one GPU fail, for the fault tests: batch number
// `fault_at_batch` (0-based, counted over every lane) first runs a fault on the wrapped
// device's GPU, then the tests watch the device and the server handle it.
// - kTrap: a trapping kernel, synchronized, so the context is poisoned before the wrapped
//   device runs the batch; the CudaDevice itself meets the sticky error and reports it
//   (INTERNAL, then unhealthy and UNAVAILABLE), the real fault path end to end.
// - kLaunchError: a launch the runtime rejects and forgets. The wrapper reports it as
//   the CudaDevice reports a fault (INTERNAL "<name> faulted: ...", unhealthy from then
//   on, UNAVAILABLE after), while the GPU stays usable for the process's other devices.
#ifndef GEMMD_TESTS_GPU_FAULT_INJECTING_DEVICE_H_
#define GEMMD_TESTS_GPU_FAULT_INJECTING_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/device.h"

namespace gemmd::testing {

enum class FaultKind { kTrap, kLaunchError };

class FaultInjectingDevice : public Device {
 public:
  FaultInjectingDevice(std::unique_ptr<Device> device, int cuda_ordinal, FaultKind kind,
                       int64_t fault_at_batch);

  const DeviceDescription& description() const override { return device_->description(); }
  std::vector<KernelDescription> Kernels() const override { return device_->Kernels(); }
  absl::StatusOr<std::string> SelectKernel(const GemmProblem& problem,
                                           absl::string_view forced_kernel) const override {
    return device_->SelectKernel(problem, forced_kernel);
  }
  absl::StatusOr<std::string> SelectQuantizedKernel(
      const QuantizedOperands& operands, absl::string_view forced_kernel) const override {
    return device_->SelectQuantizedKernel(operands, forced_kernel);
  }
  std::vector<std::string> QuantizedKernels() const override {
    return device_->QuantizedKernels();
  }
  int lanes() const override { return device_->lanes(); }
  int64_t max_batch_bytes() const override { return device_->max_batch_bytes(); }
  DeviceMemoryUsage memory() const override { return device_->memory(); }

  absl::Status RunBatch(const Batch& batch, int lane, BatchRun* run) override;
  bool healthy() const override;

 private:
  const std::unique_ptr<Device> device_;
  const int cuda_ordinal_;
  const FaultKind kind_;
  const int64_t fault_at_batch_;
  std::atomic<int64_t> batches_started_{0};
  std::atomic<bool> failed_launch_{false};  // kLaunchError happened
};

// Opens the CUDA devices of `spec` (as --devices) and wraps the first in a
// FaultInjectingDevice, so the others can show that serving goes on.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevicesFirstFaulty(
    const std::string& spec, FaultKind kind, int64_t fault_at_batch);

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_GPU_FAULT_INJECTING_DEVICE_H_
