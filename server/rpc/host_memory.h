// The host memory that requests hold, under one cap (--max_inflight_bytes), and the pool
// of buffers kept between calls (--message_pool_bytes).
//
// A request reserves what it holds from the moment its message is read: the received
// bytes until its operands are in their buffer, the operand buffer until its job is
// answered, and its result until gRPC has finished sending it (the result buffer goes
// out as a slice that references it, and frees it when gRPC lets go). So a client that
// never reads its replies pins at most the cap, not one result per call.
//
// Why a pool: a fresh buffer of a large operand or result comes straight from mmap, so
// every page faults on first touch (and page-locked memory, on CUDA, takes milliseconds
// to allocate); a kept buffer skips that. Pooled buffers count against the same cap: a
// reservation that needs their room frees them first, so the cap bounds in-flight and
// pooled bytes together. Buffers come from the backend's HostAllocator.
//
// Thread-safe. Reservations and buffers keep the HostMemory alive (it is shared), so a
// slice gRPC frees after the server has gone is still safe.
#ifndef GEMMD_SERVER_RPC_HOST_MEMORY_H_
#define GEMMD_SERVER_RPC_HOST_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/devices/host_allocator.h"

namespace gemmd {

class HostMemory;

// Bytes counted against the cap until destroyed (or Resize()d). Movable.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& other) noexcept;
  Reservation& operator=(Reservation&& other) noexcept;
  ~Reservation();

  int64_t bytes() const { return bytes_; }
  // Shrinks (always succeeds) or grows (RESOURCE_EXHAUSTED past the cap, unchanged).
  absl::Status Resize(int64_t bytes);

 private:
  friend class HostMemory;
  Reservation(std::shared_ptr<HostMemory> owner, int64_t bytes)
      : owner_(std::move(owner)), bytes_(bytes) {}

  std::shared_ptr<HostMemory> owner_;
  int64_t bytes_ = 0;
};

// A request's operands or result: `size()` bytes valid for writing, not zero-filled,
// 64-byte aligned, page-locked when the allocator's are. Counted against the cap (its
// capacity) until destroyed; then pooled or freed.
class HostBuffer {
 public:
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  friend class HostMemory;
  HostBuffer(std::shared_ptr<HostMemory> owner, char* data, size_t capacity, size_t size)
      : owner_(std::move(owner)), data_(data), capacity_(capacity), size_(size) {}

  std::shared_ptr<HostMemory> owner_;
  char* data_;
  size_t capacity_ = 0;
  size_t size_ = 0;
};

class HostMemory : public std::enable_shared_from_this<HostMemory> {
 public:
  // max_bytes: the cap (0 = none). max_pooled_bytes: most bytes of idle buffers kept (0
  // = none kept); max_pooled_buffers: most buffers kept. Buffers come from `allocator`.
  ~HostMemory();
  static std::shared_ptr<HostMemory> Create(
      int64_t max_bytes, int64_t max_pooled_bytes, size_t max_pooled_buffers = 256,
      std::shared_ptr<HostAllocator> allocator = PlainHostAllocator());

  // RESOURCE_EXHAUSTED ("server busy: ... --max_inflight_bytes") when `bytes` more would
  // pass the cap even with the pool emptied.
  absl::StatusOr<Reservation> Reserve(int64_t bytes);
  // A buffer for `bytes` (operands or a result): a pooled one when one fits (capacity at
  // most twice the size), else a new one. Fails like Reserve, for its capacity, and with
  // RESOURCE_EXHAUSTED when the allocator has no memory.
  absl::StatusOr<std::unique_ptr<HostBuffer>> AcquireBuffer(size_t bytes);
  // The same, paid for out of `from` (a reservation of this HostMemory) when it still
  // holds the buffer's capacity: those bytes move from the reservation to the buffer, so
  // what is counted does not change. Otherwise as AcquireBuffer(bytes).
  absl::StatusOr<std::unique_ptr<HostBuffer>> AcquireBuffer(size_t bytes, Reservation* from);
  // Gives `buffer` back (pooled or freed) and its capacity to `into`, a reservation of
  // this HostMemory: what is counted does not change, and `into` can pay for the next
  // buffer (a download's chunks take turns in the room it reserved).
  void Recycle(std::unique_ptr<HostBuffer> buffer, Reservation* into);

  // True when the cap leaves no room at all (a new call is then refused before its
  // message is read).
  bool Full() const;
  int64_t reserved_bytes() const;  // in-flight: reservations and buffers in use
  int64_t pooled_bytes() const;    // idle result buffers
  size_t pooled_buffers() const;
  // The most that reservations and idle buffers together have held at once.
  int64_t peak_bytes() const;
  int64_t max_bytes() const { return max_bytes_; }
  // Whether a buffer of `bytes` is page-locked (HostAllocator::page_locked).
  bool page_locked(size_t bytes) const { return allocator_->page_locked(bytes); }
  // Whether it may be (HostAllocator::may_page_lock).
  bool may_page_lock(size_t bytes) const { return allocator_->may_page_lock(bytes); }

 private:
  friend class Reservation;
  friend class HostBuffer;
  struct Idle {
    char* data = nullptr;
    size_t capacity = 0;
  };

  HostMemory(int64_t max_bytes, int64_t max_pooled_bytes, size_t max_pooled_buffers,
             std::shared_ptr<HostAllocator> allocator)
      : max_bytes_(max_bytes),
        max_pooled_bytes_(max_pooled_bytes),
        max_pooled_buffers_(max_pooled_buffers),
        allocator_(std::move(allocator)) {}
  void FreeAll(std::vector<Idle>* idle);

  // Counts `bytes` more, freeing idle buffers (into *freed, dropped outside the lock)
  // when the cap needs their room.
  absl::Status Take(int64_t bytes, std::vector<Idle>* freed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Give(int64_t bytes);
  void Return(char* data, size_t capacity);
  // Keeps an idle buffer when the pool and the cap have room for it; false: the caller
  // frees it.
  bool PoolLocked(char* data, size_t capacity) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  const int64_t max_pooled_bytes_;
  const size_t max_pooled_buffers_;
  const std::shared_ptr<HostAllocator> allocator_;
  mutable absl::Mutex mu_;
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pooled_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_HOST_MEMORY_H_
