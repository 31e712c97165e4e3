// Blocks of a few sizes (powers of two from min_block to max_block) carved from large
// chunks, kept for reuse and never given back until the pool goes. For memory that is
// expensive to get and give back one buffer at a time: the CUDA backend's page-locked
// blocks for small results (cudaHostAlloc and cudaFreeHost take a millisecond and stall
// the device; a pool block takes a lock and a pop).
//
// Reuse is first in, first out: a block freed goes to the back of its size's queue and
// the front one is handed out next. Buffers of one size allocated in turn and freed in
// about the same order (a stream's answers) then come back in address order, so a
// batch's results often lie next to each other and a device can fill several with one
// DMA.
//
// The pool holds at most max_bytes of chunks; past that Allocate answers nullptr and the
// caller uses other memory. Thread-safe.
#ifndef GEMMD_SERVER_DEVICES_BLOCK_POOL_H_
#define GEMMD_SERVER_DEVICES_BLOCK_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gemmd {

class BlockPool {
 public:
  struct Options {
    size_t min_block = 32 << 10;  // a power of two
    size_t max_block = 128 << 10;  // a power of two >= min_block
    size_t chunk_bytes = 4 << 20;  // a multiple of max_block
    size_t max_bytes = 256 << 20;  // most chunk bytes held
  };
  // allocate_chunk: chunk_bytes, aligned to at least 64 bytes, or nullptr;
  // free_chunk: gives one back (only from the destructor).
  BlockPool(Options options, std::function<char*(size_t)> allocate_chunk,
            std::function<void(char*)> free_chunk);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Whether Allocate serves `bytes` at all (min_block/2 < bytes <= max_block: a smaller
  // buffer would waste more than half its block).
  bool Serves(size_t bytes) const;
  // A block of at least `bytes` (Serves(bytes)), or nullptr when the pool is at
  // max_bytes with no free block of that size or a chunk could not be had.
  char* Allocate(size_t bytes);
  // Whether `data` is a block of this pool (Free takes it back).
  bool Owns(const char* data) const;
  // `data`: from Allocate(bytes) with the same `bytes`.
  void Free(char* data, size_t bytes);

  size_t held_bytes() const;  // chunk bytes held

 private:
  size_t ClassOf(size_t bytes) const;  // index into free_

  const Options options_;
  const std::function<char*(size_t)> allocate_chunk_;
  const std::function<void(char*)> free_chunk_;
  mutable absl::Mutex mu_;
  std::vector<char*> chunks_ ABSL_GUARDED_BY(mu_);  // sorted by address
  std::vector<std::deque<char*>> free_ ABSL_GUARDED_BY(mu_);  // per size, oldest first
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_BLOCK_POOL_H_
