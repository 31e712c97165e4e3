#include "server/devices/cuda/device_memory_pool.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"

namespace gemmd {
namespace {

// Arena sizes are multiples of this: cudaMalloc rounds to large pages anyway, and
// coarse sizes make a slightly larger batch reuse the arena instead of regrowing it.
constexpr int64_t kGranuleBytes = int64_t{2} << 20;

int64_t RoundUpToGranule(int64_t bytes) {
  return (bytes + kGranuleBytes - 1) / kGranuleBytes * kGranuleBytes;
}

}  // namespace

DeviceMemoryPool::DeviceMemoryPool(int64_t cap_bytes, int lanes)
    : cap_bytes_(cap_bytes),
      lane_share_bytes_(cap_bytes / std::max(lanes, 1)),
      arenas_(static_cast<size_t>(std::max(lanes, 1))) {}

DeviceMemoryPool::~DeviceMemoryPool() {
  for (Arena& arena : arenas_) Release(arena);
}

void DeviceMemoryPool::Release(Arena& arena) {
  if (arena.ptr == nullptr) return;
  // cudaFree waits for the device to finish with the memory; errors (a faulted context)
  // leave nothing to do.
  (void)cudaFree(arena.ptr);
  held_bytes_.fetch_sub(static_cast<int64_t>(arena.bytes), std::memory_order_relaxed);
  arena.ptr = nullptr;
  arena.bytes = 0;
}

absl::StatusOr<void*> DeviceMemoryPool::Acquire(int lane, int64_t bytes) {
  if (lane < 0 || lane >= static_cast<int>(arenas_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory pool lane ", lane, " is not in [0, ", arenas_.size(), ")"));
  }
  Arena& arena = arenas_[static_cast<size_t>(lane)];
  bytes = std::max<int64_t>(bytes, 1);  // never hand out null, even for empty batches
  if (static_cast<uint64_t>(bytes) <= arena.bytes) return arena.ptr;
  if (bytes > lane_share_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a batch needs ", bytes, " bytes of device memory, more than one lane's share (",
        lane_share_bytes_, " bytes) of the device memory cap of ", cap_bytes_,
        " bytes; raise --device_memory_limit_bytes or send smaller requests"));
  }
  // Grow by at least 1.25x so a slowly rising batch size regrows rarely, but never past
  // the lane's share: the cap is a promise to the operator.
  const int64_t wanted = RoundUpToGranule(bytes);
  const int64_t grown = RoundUpToGranule(static_cast<int64_t>(arena.bytes) / 4 * 5);
  int64_t size = std::min(std::max(wanted, grown), lane_share_bytes_);
  size = std::max(size, bytes);  // the share need not be a multiple of the granule
  // Free first: holding old and new together could exceed the cap, and the contents
  // need not survive (every batch copies its operands in afresh).
  Release(arena);
  void* ptr = nullptr;
  cudaError_t error = cudaMalloc(&ptr, static_cast<size_t>(size));
  if (error == cudaErrorMemoryAllocation && size > bytes) {
    // The headroom did not fit (other processes use the GPU too); the request may.
    (void)cudaGetLastError();
    size = std::min(wanted, lane_share_bytes_);
    size = std::max(size, bytes);
    error = cudaMalloc(&ptr, static_cast<size_t>(size));
  }
  if (error == cudaErrorMemoryAllocation) {
    // Not a fault: the error is not sticky, and clearing it keeps a later launcher's
    // cudaGetLastError() from reporting it as its own.
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", size,
                     " bytes failed: out of device memory (the device memory cap is ", cap_bytes_,
                     " bytes; lower --device_memory_limit_bytes if other processes share the "
                     "GPU, or send smaller requests)"));
  }
  if (error != cudaSuccess) {
    return gpu::CudaErrorToStatus(error, "cudaMalloc(arena)", __FILE__, __LINE__);
  }
  arena.ptr = ptr;
  arena.bytes = static_cast<size_t>(size);
  held_bytes_.fetch_add(size, std::memory_order_relaxed);
  return ptr;
}

}  // namespace gemmd
