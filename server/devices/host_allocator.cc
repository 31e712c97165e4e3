#include "server/devices/host_allocator.h"

#include <new>

namespace gemmd {
namespace {

class PlainAllocator final : public HostAllocator {
 public:
  char* Allocate(size_t bytes) override {
    // Uninitialized: whoever fills the buffer writes every byte, so no page is touched
    // twice.
    return static_cast<char*>(::operator new[](bytes, std::align_val_t{64}, std::nothrow));
  }
  void Free(char* data, size_t /*bytes*/) override {
    ::operator delete[](data, std::align_val_t{64});
  }
  bool page_locked(size_t /*bytes*/) const override { return false; }
};

}  // namespace

std::shared_ptr<HostAllocator> PlainHostAllocator() {
  static const auto* const kPlain = new std::shared_ptr<HostAllocator>(new PlainAllocator);
  return *kPlain;
}

}  // namespace gemmd
