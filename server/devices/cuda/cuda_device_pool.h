// Opens the GPUs the server serves on (--devices) as CudaDevices.
#ifndef GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_POOL_H_
#define GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_POOL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/devices/backend.h"
#include "server/devices/cuda/cuda_device.h"
#include "server/devices/device.h"

namespace gemmd {

// GPUs the CUDA runtime sees; 0 on any error (no driver, no device), so --backend=auto
// can ask without caring why.
int CudaDeviceCount();

// One CudaDevice per GPU named by `spec`: "all", or a comma list of ordinals such as
// "0,2" (opened in that order; each device's index is its ordinal). INVALID_ARGUMENT
// for a malformed list, a duplicate or an ordinal this machine does not have;
// FAILED_PRECONDITION "no CUDA device found" when the runtime sees none (with the CUDA
// error when it could not even count, e.g. no driver); CudaDevice::Create's errors
// otherwise.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(
    absl::string_view spec, const CudaDeviceOptions& options);

// OpenCudaDevices, the catalogue that chooses kernels for them (CudaCatalogue, for the
// least capable of the GPUs), and page-locked request buffers (PinnedHostAllocator).
absl::StatusOr<Backend> OpenCudaBackend(absl::string_view spec, const CudaDeviceOptions& options);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_POOL_H_
