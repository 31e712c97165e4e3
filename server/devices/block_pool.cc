#include "server/devices/block_pool.h"

#include <algorithm>
#include <utility>

namespace gemmd {

BlockPool::BlockPool(Options options, std::function<char*(size_t)> allocate_chunk,
                     std::function<void(char*)> free_chunk)
    : options_(options), free_chunk_(std::move(free_chunk)) {
  size_t classes = 0;
  for (size_t size = options_.min_block; size <= options_.max_block; size *= 2) ++classes;
  free_.resize(classes);
  for (size_t held = 0; held + options_.chunk_bytes <= options_.max_bytes;
       held += options_.chunk_bytes) {
    char* chunk = allocate_chunk(options_.chunk_bytes);
    if (chunk == nullptr) break;
    chunks_.push_back(chunk);
  }
  std::sort(chunks_.begin(), chunks_.end());
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
    if (carved_ == chunks_.size()) return nullptr;
    char* chunk = chunks_[carved_++];
    for (size_t at = 0; at + block <= options_.chunk_bytes; at += block) {
      queue.push_back(chunk + at);
    }
  }
  char* data = queue.front();
  queue.pop_front();
  return data;
}

const char* BlockPool::ChunkOf(const char* data) const {
  // chunks_ never changes after the constructor: no lock.
  auto after = std::upper_bound(chunks_.begin(), chunks_.end(), data,
                                [](const char* p, const char* chunk) { return p < chunk; });
  if (after == chunks_.begin()) return nullptr;
  const char* chunk = *(after - 1);
  return data < chunk + options_.chunk_bytes ? chunk : nullptr;
}

bool BlockPool::Owns(const char* data) const { return ChunkOf(data) != nullptr; }

bool BlockPool::SameChunk(const char* a, const char* b) const {
  const char* chunk = ChunkOf(a);
  return chunk != nullptr && chunk == ChunkOf(b);
}

void BlockPool::Free(char* data, size_t bytes) {
  absl::MutexLock lock(&mu_);
  free_[ClassOf(bytes)].push_back(data);
}

size_t BlockPool::held_bytes() const { return chunks_.size() * options_.chunk_bytes; }

}  // namespace gemmd
