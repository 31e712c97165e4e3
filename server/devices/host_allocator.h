// Where the host buffers that requests' operands and results live in come from: plain
// memory on the CPU backend; page-locked memory on CUDA, so a GPU's DMA reads operands
// and writes results in place and no staging copy is needed. The server's HostMemory
// pools these buffers (allocating page-locked memory is slow) and owns the allocator
// for as long as any buffer lives. Thread-safe.
#ifndef GEMMD_SERVER_DEVICES_HOST_ALLOCATOR_H_
#define GEMMD_SERVER_DEVICES_HOST_ALLOCATOR_H_

#include <cstddef>
#include <memory>

namespace gemmd {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // `bytes` (> 0) uninitialized bytes, 64-byte aligned at least; nullptr when the system
  // has none to give.
  virtual char* Allocate(size_t bytes) = 0;
  virtual void Free(char* data, size_t bytes) = 0;
  // Whether every buffer of `bytes` from Allocate is page-locked, large enough that a
  // device moves it by its own DMA in place (an allocator may page-lock some smaller
  // ones too: a device asks of the pointer).
  virtual bool page_locked(size_t bytes) const = 0;
  // Whether a buffer of `bytes` may come page-locked (always, or from a pool of
  // page-locked blocks while it has one free): a device then moves it by DMA in place, so
  // an operand of that size is worth copying into such a buffer where it arrived rather
  // than gathering it from where it arrived when its batch launches.
  virtual bool may_page_lock(size_t bytes) const { return page_locked(bytes); }
};

// operator new[] memory, not page-locked.
std::shared_ptr<HostAllocator> PlainHostAllocator();

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_HOST_ALLOCATOR_H_
