// Device memory of one GPU for the CUDA backend, under a byte cap
// (--device_memory_limit_bytes).
//
// Each lane (one Run at a time) owns one arena: a single cudaMalloc that holds a
// whole batch (operands, result, kernel workspace) and is reused by the lane's next
// batch, so steady-state serving allocates nothing. An arena grows on demand, in 2 MiB
// steps and by at least 1.25x, so a slowly rising batch size does not reallocate each
// time; it never exceeds the lane's share of the cap (cap / lanes), which is what keeps
// two lanes from starving each other.
//
// Threads: Acquire for one lane is called by that lane's worker only; different lanes
// may call it concurrently. held_bytes() and cap_bytes() may be called from any thread.
// The device the pool belongs to must be current whenever Acquire or the destructor
// runs (the owner makes it so).
#ifndef GEMMD_SERVER_DEVICES_CUDA_DEVICE_MEMORY_POOL_H_
#define GEMMD_SERVER_DEVICES_CUDA_DEVICE_MEMORY_POOL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace gemmd {

class DeviceMemoryPool {
 public:
  // `cap_bytes` > 0 and `lanes` >= 1 (checked by the owner). Allocates nothing yet.
  DeviceMemoryPool(int64_t cap_bytes, int lanes);
  ~DeviceMemoryPool();
  DeviceMemoryPool(const DeviceMemoryPool&) = delete;
  DeviceMemoryPool& operator=(const DeviceMemoryPool&) = delete;

  // Device memory of at least `bytes` bytes (256-byte aligned, never null) for `lane`,
  // valid until that lane's next Acquire; its contents are not preserved across growth.
  // RESOURCE_EXHAUSTED when `bytes` exceeds the lane share or cudaMalloc runs out of
  // memory (the device stays usable); INTERNAL for other CUDA errors; INVALID_ARGUMENT
  // for a lane out of range.
  absl::StatusOr<void*> Acquire(int lane, int64_t bytes);

  int64_t held_bytes() const { return held_bytes_.load(std::memory_order_relaxed); }
  int64_t cap_bytes() const { return cap_bytes_; }
  int64_t lane_share_bytes() const { return lane_share_bytes_; }

 private:
  struct Arena {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  // Frees the lane's arena (held bytes drop accordingly).
  void Release(Arena& arena);

  const int64_t cap_bytes_;
  const int64_t lane_share_bytes_;
  // One per lane; each touched only by its lane's thread (and the destructor). Raw
  // cudaMalloc rather than DeviceBuffer so an out-of-memory error can be told apart
  // from a fault by its cudaError_t.
  std::vector<Arena> arenas_;
  std::atomic<int64_t> held_bytes_{0};
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_DEVICE_MEMORY_POOL_H_
