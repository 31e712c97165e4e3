// Host memory for the CUDA backend's request buffers (HostAllocator), page-locked where a
// device copies it in place:
// - a buffer of kPageLockedMinBytes or more is its own page-locked allocation: operands
//   copied off the wire into it and results written into it move between host and GPU by
//   their own DMA, with no pass through the staging ring;
// - a buffer above kPinnedBlockMinBytes and below that is a block of a pool of page-locked
//   chunks (BlockPool; allocating page-locked memory per buffer costs far more than the
//   buffer would gain) while the pool has room, else plain memory. A result there is
//   DMA'd into place instead of being unpacked from the staging ring by a host copy;
// - smaller buffers are plain memory: their regions gather through the staging ring.
// Portable, so every GPU of the process may use it. Thread-safe.
#ifndef GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
#define GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_

#include <memory>

#include "server/devices/host_allocator.h"

namespace gemmd {

inline constexpr size_t kPageLockedMinBytes = 256 << 10;
inline constexpr size_t kPinnedBlockMinBytes = 16 << 10;
// The most page-locked memory the small buffers' pool holds.
inline constexpr size_t kPinnedBlockPoolBytes = 256 << 20;

std::shared_ptr<HostAllocator> PinnedHostAllocator();

// Whether `host` lies in page-locked memory (this allocator's, or any other CUDA knows).
bool IsPageLocked(const void* host);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
