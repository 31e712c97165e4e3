#include "server/devices/cuda/pinned_host_allocator.h"

#include <cuda_runtime_api.h>

#include "server/devices/block_pool.h"

namespace gemmd {
namespace {

char* AllocatePageLocked(size_t bytes) {
  void* data = nullptr;
  if (cudaHostAlloc(&data, bytes, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();  // out of page-locked memory is not a device fault
    return nullptr;
  }
  return static_cast<char*>(data);
}

void FreePageLocked(char* data) {
  if (cudaFreeHost(data) != cudaSuccess) (void)cudaGetLastError();
}

// Blocks of 32, 64 and 128 KiB: every size above kPinnedBlockMinBytes and below
// kPageLockedMinBytes.
BlockPool::Options BlockOptions() {
  BlockPool::Options options;
  options.min_block = 2 * kPinnedBlockMinBytes;
  options.max_block = kPageLockedMinBytes / 2;
  options.chunk_bytes = 4 << 20;
  options.max_bytes = kPinnedBlockPoolBytes;
  return options;
}

// One pool for the process (page-locked memory is the process's, and portable): made on
// first use (the first allocator, or the first IsPageLocked / SamePinnedChunk) and kept
// until the process ends, so a DMA planned from SamePinnedChunk never outlives its chunk.
BlockPool& SharedBlocks() {
  static BlockPool* const blocks =
      new BlockPool(BlockOptions(), AllocatePageLocked, FreePageLocked);
  return *blocks;
}

class PinnedAllocator final : public HostAllocator {
 public:
  char* Allocate(size_t bytes) override {
    if (page_locked(bytes)) return AllocatePageLocked(bytes);
    if (char* block = blocks_.Allocate(bytes); block != nullptr) return block;
    return plain_->Allocate(bytes);
  }
  void Free(char* data, size_t bytes) override {
    if (page_locked(bytes)) {
      FreePageLocked(data);
    } else if (blocks_.Serves(bytes) && blocks_.Owns(data)) {
      blocks_.Free(data, bytes);
    } else {
      plain_->Free(data, bytes);
    }
  }
  bool page_locked(size_t bytes) const override { return bytes >= kPageLockedMinBytes; }
  bool may_page_lock(size_t bytes) const override {
    return page_locked(bytes) || blocks_.Serves(bytes);
  }

 private:
  const std::shared_ptr<HostAllocator> plain_ = PlainHostAllocator();
  BlockPool& blocks_ = SharedBlocks();
};

}  // namespace

std::shared_ptr<HostAllocator> PinnedHostAllocator() { return std::make_shared<PinnedAllocator>(); }

bool SamePinnedChunk(const void* first, const void* last) {
  return SharedBlocks().SameChunk(static_cast<const char*>(first), static_cast<const char*>(last));
}

bool IsPageLocked(const void* host) {
  if (SharedBlocks().Owns(static_cast<const char*>(host))) return true;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace gemmd
