// Kernels that take more than 48 KiB of dynamic shared memory must say so to the driver
// per device, once: every family's launcher does it through here. Host-only header.
#ifndef GEMMD_KERNELS_CUDA_COMMON_DYNAMIC_SMEM_H_
#define GEMMD_KERNELS_CUDA_COMMON_DYNAMIC_SMEM_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace gemmd::gpu::internal {

// Sets the dynamic shared-memory limit of `func` on the current device once per device
// (devices 0-63 remembered in `done_mask`). INTERNAL for CUDA errors.
absl::Status EnsureDynamicSmem(const void* func, int bytes, std::atomic<uint64_t>* done_mask);

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_DYNAMIC_SMEM_H_
