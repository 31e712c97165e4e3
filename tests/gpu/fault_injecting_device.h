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

#include "server/devices/backend.h"
#include "server/devices/device.h"

namespace gemmd::testing {

enum class FaultKind { kTrap, kLaunchError };

class FaultInjectingDevice : public Device {
 public:
  FaultInjectingDevice(std::unique_ptr<Device> device, int cuda_ordinal, FaultKind kind,
                       int64_t fault_at_batch);

  const DeviceDescription& description() const override { return device_->description(); }
  int lanes() const override { return device_->lanes(); }
  int64_t max_batch_bytes() const override { return device_->max_batch_bytes(); }
  DeviceMemoryUsage memory() const override { return device_->memory(); }
  bool gathers_pieces() const override { return device_->gathers_pieces(); }

  absl::Status Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) override;
  bool healthy() const override;

  // Resident tensors stay the wrapped GPU's, in its device memory.
  absl::StatusOr<void*> AllocateResident(int64_t bytes) override {
    return device_->AllocateResident(bytes);
  }
  absl::Status FreeResident(void* memory, int64_t bytes) override {
    return device_->FreeResident(memory, bytes);
  }
  int64_t ResidentFootprint(int64_t bytes) const override {
    return device_->ResidentFootprint(bytes);
  }
  absl::Status WriteResident(void* resident, const void* host, size_t bytes) override {
    return device_->WriteResident(resident, host, bytes);
  }
  absl::Status WriteResidentRuns(void* resident,
                                 const std::vector<absl::string_view>& runs) override {
    return device_->WriteResidentRuns(resident, runs);
  }
  absl::Status ReadResident(void* host, const void* resident, size_t bytes) override {
    return device_->ReadResident(host, resident, bytes);
  }
  bool resident_in_host_memory() const override { return device_->resident_in_host_memory(); }

 private:
  const std::unique_ptr<Device> device_;
  const int cuda_ordinal_;
  const FaultKind kind_;
  const int64_t fault_at_batch_;
  std::atomic<int64_t> batches_started_{0};
  std::atomic<bool> failed_launch_{false};  // kLaunchError happened
};

// The CUDA backend of `spec` (as --devices) with its first GPU wrapped in a
// FaultInjectingDevice, so the others can show that serving goes on.
absl::StatusOr<Backend> OpenCudaBackendFirstFaulty(const std::string& spec, FaultKind kind,
                                                   int64_t fault_at_batch);

}  // namespace gemmd::testing

#endif  // GEMMD_TESTS_GPU_FAULT_INJECTING_DEVICE_H_
