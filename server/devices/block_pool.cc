#include "server/devices/block_pool.h"

#include <algorithm>
#include <utility>

namespace gemmd {

BlockPool::BlockPool(Options options, std::function<char*(size_t)> allocate_chunk,
                     std::function<void(char*)> free_chunk)
    : options_(options),
      allocate_chunk_(std::move(allocate_chunk)),
      free_chunk_(std::move(free_chunk)) {
  size_t classes = 0;
  for (size_t size = options_.min_block; size <= options_.max_block; size *= 2) ++classes;
  free_.resize(classes);
}

BlockPool::~BlockPool() {
  for (char* chunk : chunks_) free_chunk_(chunk);
}

bool BlockPool::Serves(size_t bytes) const {
  return bytes > options_.min_block / 2 && bytes <= options_.max_block;
}

size_t BlockPool::ClassOf(size_t bytes) const {
  size_t index = 0;
  for (size_t size = options_.min_block; size < bytes; size *= 2) ++index;
  return index;
}

char* BlockPool::Allocate(size_t bytes) {
  if (!Serves(bytes)) return nullptr;
  const size_t index = ClassOf(bytes);
  const size_t block = options_.min_block << index;
  absl::MutexLock lock(&mu_);
  std::deque<char*>& queue = free_[index];
  if (queue.empty()) {
    if ((chunks_.size() + 1) * options_.chunk_bytes > options_.max_bytes) return nullptr;
    // Allocating under the lock keeps the cap exact; a chunk serves many blocks, so
    // callers wait for one rarely.
    char* chunk = allocate_chunk_(options_.chunk_bytes);
    if (chunk == nullptr) return nullptr;
    chunks_.insert(std::upper_bound(chunks_.begin(), chunks_.end(), chunk), chunk);
    for (size_t at = 0; at + block <= options_.chunk_bytes; at += block) {
      queue.push_back(chunk + at);
    }
  }
  char* data = queue.front();
  queue.pop_front();
  return data;
}

bool BlockPool::Owns(const char* data) const {
  absl::MutexLock lock(&mu_);
  auto after = std::upper_bound(chunks_.begin(), chunks_.end(), data,
                                [](const char* p, const char* chunk) { return p < chunk; });
  if (after == chunks_.begin()) return false;
  const char* chunk = *(after - 1);
  return data < chunk + options_.chunk_bytes;
}

void BlockPool::Free(char* data, size_t bytes) {
  absl::MutexLock lock(&mu_);
  free_[ClassOf(bytes)].push_back(data);
}

size_t BlockPool::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return chunks_.size() * options_.chunk_bytes;
}

}  // namespace gemmd
