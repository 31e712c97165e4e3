// Blocks of a few sizes (powers of two from min_block to max_block) carved from large
// chunks, kept for reuse. For memory that is expensive to get and give back one buffer at
// a time: the CUDA backend's page-locked blocks for small results (cudaHostAlloc and
// cudaFreeHost take a millisecond and synchronize the device; a pool block takes a lock
// and a pop).
//
// Every chunk is allocated when the pool is made and given back when it goes: Allocate
// never allocates, so no thread answering a request ever waits for page-locked memory
// (or for the device work that allocating it may wait for). A chunk is carved into
// blocks of one size the first time that size runs out.
//
// Reuse is first in, first out: a block freed goes to the back of its size's queue and
// the front one is handed out next. Buffers of one size allocated in turn and freed in
// about the same order (a stream's answers) then come back in address order, so a
// batch's results often lie next to each other and a device can fill several with one
// DMA.
//
// When no block of a size is free and no chunk is left to carve, Allocate answers nullptr
// and the caller uses other memory. Thread-safe.
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
    size_t min_block = 32 << 10;   // a power of two
    size_t max_block = 128 << 10;  // a power of two >= min_block
    size_t chunk_bytes = 4 << 20;  // a multiple of max_block
    size_t max_bytes = 64 << 20;   // chunk bytes allocated when the pool is made
  };
  // allocate_chunk: chunk_bytes, aligned to at least 64 bytes, or nullptr (the pool then
  // holds the chunks it got); free_chunk: gives one back (only from the destructor).
  BlockPool(Options options, std::function<char*(size_t)> allocate_chunk,
            std::function<void(char*)> free_chunk);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Whether Allocate serves `bytes` at all (min_block/2 < bytes <= max_block: a smaller
  // buffer would waste more than half its block).
  bool Serves(size_t bytes) const;
  // A block of at least `bytes` (Serves(bytes)), or nullptr when none of that size is
  // free and every chunk is carved.
  char* Allocate(size_t bytes);
  // Whether `data` is a block of this pool (Free takes it back).
  bool Owns(const char* data) const;
  // Whether `a` and `b` lie in one chunk (one allocation: a device may copy a range that
  // spans both in one go; two chunks may lie next to each other and still be two).
  bool SameChunk(const char* a, const char* b) const;
  // `data`: from Allocate(bytes) with the same `bytes`.
  void Free(char* data, size_t bytes);

  size_t held_bytes() const;  // chunk bytes held (carved or not)

 private:
  size_t ClassOf(size_t bytes) const;           // index into free_
  const char* ChunkOf(const char* data) const;  // its chunk, or nullptr

  const Options options_;
  const std::function<void(char*)> free_chunk_;
  std::vector<char*> chunks_;  // sorted by address; fixed once made
  mutable absl::Mutex mu_;
  size_t carved_ ABSL_GUARDED_BY(mu_) = 0;                    // chunks_[0, carved_) are carved
  std::vector<std::deque<char*>> free_ ABSL_GUARDED_BY(mu_);  // per size, oldest first
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_BLOCK_POOL_H_
