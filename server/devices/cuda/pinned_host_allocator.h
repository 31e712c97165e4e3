// Host memory for the CUDA backend's request buffers (HostAllocator), page-locked where a
// device copies it in place:
// - a buffer of kPageLockedMinBytes or more is its own page-locked allocation: operands
//   copied off the wire into it and results written into it move between host and GPU by
//   their own DMA, with no pass through the staging ring;
// - a buffer above kPinnedBlockMinBytes and below that is a block of a pool of page-locked
//   chunks (BlockPool; allocating page-locked memory per buffer costs far more than the
//   buffer would gain) while the pool has one free, else plain memory. A result there is
//   DMA'd into place instead of being unpacked from the staging ring by a host copy. One
//   pool serves the process; its chunks are page-locked on its first use (the server's
//   start), never while a request waits (cudaHostAlloc may wait for the device);
// - smaller buffers are plain memory: their regions gather through the staging ring.
// Portable, so every GPU of the process may use it. Thread-safe.
#ifndef GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
#define GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_

#include <memory>

#include "server/devices/host_allocator.h"

namespace gemmd {

inline constexpr size_t kPageLockedMinBytes = 256 << 10;
inline constexpr size_t kPinnedBlockMinBytes = 16 << 10;
// The page-locked memory the small buffers' pool holds: room for 1024 results of 64 KiB
// (a 128^3 FP32 C), twice what 8 streams with 64 requests in flight each hold.
inline constexpr size_t kPinnedBlockPoolBytes = 64 << 20;

std::shared_ptr<HostAllocator> PinnedHostAllocator();

// Whether `host` lies in page-locked memory (this allocator's, or any other CUDA knows).
bool IsPageLocked(const void* host);
// Whether the bytes `first` and `last` lie in one chunk of the pool of page-locked blocks:
// one DMA may then fill both and what lies between. (Two page-locked allocations may lie
// next to each other; a DMA that spans them is an invalid argument.)
bool SamePinnedChunk(const void* first, const void* last);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
