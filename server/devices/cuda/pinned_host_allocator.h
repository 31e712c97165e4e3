// Host memory for the CUDA backend's request buffers (HostAllocator): a buffer large
// enough for its own DMA (kPageLockedMinBytes) is page-locked, so operands copied off
// the wire into it and results written into it move between host and GPU directly, with
// no pass through the staging ring; portable, so every GPU of the process may use it.
// Smaller buffers are plain memory: their regions gather through the staging ring (many
// share one DMA there), and page-locking costs far more than they would gain.
// Thread-safe.
#ifndef GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
#define GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_

#include <memory>

#include "server/devices/host_allocator.h"

namespace gemmd {

inline constexpr size_t kPageLockedMinBytes = 256 << 10;

std::shared_ptr<HostAllocator> PinnedHostAllocator();

// Whether `host` lies in page-locked memory (this allocator's, or any other CUDA knows).
bool IsPageLocked(const void* host);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
