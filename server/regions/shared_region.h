// One registered shared-memory region: a POSIX shared-memory object (or a range of it)
// mapped into the server, whose operands are read and whose results are written in
// place. The mapping stays while anything holds the region (the table, a call using
// it), so unregistering or unlinking it under a call never unmaps memory the call
// reads; truncating it under a call is caught (BusFaultGuard) and fails that call.
// Thread-safe.
#ifndef GEMMD_SERVER_REGIONS_SHARED_REGION_H_
#define GEMMD_SERVER_REGIONS_SHARED_REGION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gemmd {

// Page-locks host memory for a device's DMA (cudaHostRegister) and releases it; either
// may be empty (a CPU server reads the region in place as it is).
struct HostPinning {
  std::function<bool(void* memory, size_t bytes)> pin;  // false: left pageable
  std::function<void(void* memory)> unpin;
};

class SharedRegion {
 public:
  // Opens `key` (shm_open, read-write) and maps [offset, offset + bytes) of it (bytes 0:
  // to the object's end). NOT_FOUND: no such object; PERMISSION_DENIED: the server may
  // not open it; OUT_OF_RANGE: the object is smaller than the range; INVALID_ARGUMENT:
  // not a plain shared-memory object, or an empty range; RESOURCE_EXHAUSTED: a range
  // over `max_bytes` (checked before anything is mapped or page-locked), or the server
  // guards as many regions as it can.
  static absl::StatusOr<std::shared_ptr<SharedRegion>> Map(std::string name, std::string key,
                                                           int64_t offset, int64_t bytes,
                                                           const HostPinning& pinning,
                                                           int64_t max_bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  int64_t offset() const { return offset_; }
  int64_t bytes() const { return bytes_; }
  bool page_locked() const { return page_locked_; }
  absl::Time registered() const { return registered_; }
  char* data() const { return data_; }

  // Bytes [offset, offset + bytes) of the region: OUT_OF_RANGE naming `field` when they
  // are not all inside it, INVALID_ARGUMENT for a negative offset or size; and, as
  // CheckIntact, FAILED_PRECONDITION when it has been truncated.
  absl::StatusOr<char*> Slice(absl::string_view field, int64_t offset, int64_t bytes) const;

  // OK while the object still covers the registered range and no access to it has hit a
  // truncated page since registration (FAILED_PRECONDITION otherwise: register it
  // again), and it has not been unregistered (ABORTED: a call using it then fails).
  absl::Status CheckIntact() const;

  // Marks the region unregistered: calls still using it fail when they finish.
  void MarkUnregistered() { unregistered_.store(true, std::memory_order_release); }

 private:
  SharedRegion() = default;

  std::string name_, key_;
  int64_t offset_ = 0, bytes_ = 0;
  int fd_ = -1;
  void* base_ = nullptr;  // the mapping, from offset rounded down to a page
  size_t mapped_ = 0;
  char* data_ = nullptr;  // base_ + (offset_ - that rounding)
  int guard_slot_ = -1;
  bool page_locked_ = false;
  std::function<void(void*)> unpin_;
  absl::Time registered_;
  std::atomic<bool> unregistered_{false};
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_REGIONS_SHARED_REGION_H_
