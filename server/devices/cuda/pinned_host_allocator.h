// Page-locked host memory for the CUDA backend's request buffers (HostAllocator):
// operands copied off the wire into it and results written into it are moved by the
// GPU's DMA directly, with no pass through the staging ring. Portable, so every GPU of
// the process may DMA to and from it. Thread-safe.
#ifndef GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
#define GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_

#include <memory>

#include "server/devices/host_allocator.h"

namespace gemmd {

std::shared_ptr<HostAllocator> PinnedHostAllocator();

// Whether `host` lies in page-locked memory (this allocator's, or any other CUDA knows).
bool IsPageLocked(const void* host);

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_PINNED_HOST_ALLOCATOR_H_
