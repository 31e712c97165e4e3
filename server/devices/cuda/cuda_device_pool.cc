#include "server/devices/cuda/cuda_device_pool.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/devices/cuda/cuda_catalogue.h"
#include "server/devices/cuda/pinned_host_allocator.h"

namespace gemmd {
namespace {

// The ordinals of a comma list, or nullopt for "all". Syntax only (no CUDA call), so a
// typo is reported as such even on a machine without GPUs.
absl::StatusOr<std::optional<std::vector<int>>> ParseSpec(absl::string_view spec) {
  spec = absl::StripAsciiWhitespace(spec);
  if (spec == "all") return std::optional<std::vector<int>>();
  std::vector<int> ordinals;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    item = absl::StripAsciiWhitespace(item);
    int ordinal = -1;
    if (!absl::SimpleAtoi(item, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices=", spec, ": '", item,
                       "' is not a GPU ordinal; use all or a comma list such as 0,2"));
    }
    if (std::find(ordinals.begin(), ordinals.end(), ordinal) != ordinals.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices=", spec, ": GPU ", ordinal, " is listed twice"));
    }
    ordinals.push_back(ordinal);
  }
  return std::optional<std::vector<int>>(std::move(ordinals));
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // keep the failure out of later error checks
    return 0;
  }
  return count;
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(
    absl::string_view spec, const CudaDeviceOptions& options) {
  absl::StatusOr<std::optional<std::vector<int>>> parsed = ParseSpec(spec);
  if (!parsed.ok()) return parsed.status();

  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device found: cudaGetDeviceCount failed with ",
                     cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device found");

  std::vector<int> ordinals;
  if (parsed->has_value()) {
    ordinals = **parsed;
  } else {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  for (int ordinal : ordinals) {
    if (ordinal >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices=", absl::StripAsciiWhitespace(spec), ": GPU ", ordinal,
                       " does not exist; this machine has ", count, " GPU", count == 1 ? "" : "s",
                       " (ordinals 0..", count - 1, ")"));
    }
  }

  std::vector<std::unique_ptr<Device>> devices;
  for (int ordinal : ordinals) {
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(ordinal, options);
    if (!device.ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat("opening cuda:", ordinal, ": ", device.status().message()));
    }
    devices.push_back(*std::move(device));
  }
  return devices;
}

absl::StatusOr<Backend> OpenCudaBackend(absl::string_view spec, const CudaDeviceOptions& options) {
  absl::StatusOr<std::vector<std::unique_ptr<Device>>> devices = OpenCudaDevices(spec, options);
  if (!devices.ok()) return devices.status();
  const gpu::DeviceCaps* least = nullptr;
  for (const std::unique_ptr<Device>& d : *devices) {
    const gpu::DeviceCaps& caps = static_cast<const CudaDevice&>(*d).caps();
    if (least == nullptr || caps.compute_capability < least->compute_capability) least = &caps;
  }
  Backend backend;
  backend.name = "cuda";
  backend.catalogue = std::make_unique<CudaCatalogue>(*least);
  backend.devices = *std::move(devices);
  backend.host_allocator = PinnedHostAllocator();
  return backend;
}

}  // namespace gemmd
