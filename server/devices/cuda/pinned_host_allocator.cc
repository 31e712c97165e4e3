#include "server/devices/cuda/pinned_host_allocator.h"

#include <cuda_runtime_api.h>

namespace gemmd {
namespace {

class PinnedAllocator final : public HostAllocator {
 public:
  char* Allocate(size_t bytes) override {
    if (!page_locked(bytes)) return plain_->Allocate(bytes);
    void* data = nullptr;
    if (cudaHostAlloc(&data, bytes, cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // out of page-locked memory is not a device fault
      return nullptr;
    }
    return static_cast<char*>(data);
  }
  void Free(char* data, size_t bytes) override {
    if (!page_locked(bytes)) {
      plain_->Free(data, bytes);
      return;
    }
    if (cudaFreeHost(data) != cudaSuccess) (void)cudaGetLastError();
  }
  bool page_locked(size_t bytes) const override { return bytes >= kPageLockedMinBytes; }

 private:
  const std::shared_ptr<HostAllocator> plain_ = PlainHostAllocator();
};

}  // namespace

std::shared_ptr<HostAllocator> PinnedHostAllocator() { return std::make_shared<PinnedAllocator>(); }

bool IsPageLocked(const void* host) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace gemmd
