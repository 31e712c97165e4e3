#include "tests/gpu/fault_injecting_device.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/devices/cuda/cuda_device_pool.h"
#include "tests/gpu/fault_kernels.h"

namespace gemmd::testing {

FaultInjectingDevice::FaultInjectingDevice(std::unique_ptr<Device> device, int cuda_ordinal,
                                           FaultKind kind, int64_t fault_at_batch)
    : device_(std::move(device)),
      cuda_ordinal_(cuda_ordinal),
      kind_(kind),
      fault_at_batch_(fault_at_batch) {}

bool FaultInjectingDevice::healthy() const {
  return !failed_launch_.load(std::memory_order_acquire) && device_->healthy();
}

absl::Status FaultInjectingDevice::Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) {
  if (failed_launch_.load(std::memory_order_acquire)) {
    return absl::UnavailableError(
        absl::StrCat("cuda:", cuda_ordinal_, " is unhealthy after an earlier fault"));
  }
  if (batches_started_.fetch_add(1, std::memory_order_relaxed) == fault_at_batch_) {
    // Worker threads serve any device: make this one current for the launch.
    if (cudaSetDevice(cuda_ordinal_) != cudaSuccess) {
      return absl::InternalError(absl::StrCat("cudaSetDevice(", cuda_ordinal_, ") failed"));
    }
    if (kind_ == FaultKind::kTrap) {
      // The wrapped device's next CUDA call meets the sticky error.
      (void)LaunchTrapKernel(nullptr);
      (void)cudaDeviceSynchronize();
    } else {
      const absl::Status launched = LaunchInvalidKernel(nullptr);
      failed_launch_.store(true, std::memory_order_release);
      return absl::InternalError(
          absl::StrCat(description().name, " faulted: ", launched.message()));
    }
  }
  return device_->Run(launch, lane, times);
}

absl::StatusOr<Backend> OpenCudaBackendFirstFaulty(const std::string& spec, FaultKind kind,
                                                   int64_t fault_at_batch) {
  absl::StatusOr<Backend> backend = OpenCudaBackend(spec, CudaDeviceOptions());
  if (!backend.ok()) return backend.status();
  std::unique_ptr<Device>& first = backend->devices.front();
  // "cuda" devices are indexed by ordinal in their description.
  const int ordinal = first->description().index;
  first = std::make_unique<FaultInjectingDevice>(std::move(first), ordinal, kind,
                                                 fault_at_batch);
  return backend;
}

}  // namespace gemmd::testing
