#include "server/regions/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/regions/bus_fault_guard.h"

namespace gemmd {
namespace {

absl::Status OpenError(const std::string& key, int error) {
  const std::string why = absl::StrCat("shm_open(\"", key, "\"): ", std::strerror(error));
  if (error == ENOENT) {
    return absl::NotFoundError(absl::StrCat("no shared-memory object ", key,
                                            " (create it first, e.g. shm_open with O_CREAT; ",
                                            why, ")"));
  }
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat("the server may not open ", key, " read-write (", why, ")"));
  }
  return absl::InvalidArgumentError(why);
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedRegion::Map(std::string name,
                                                                std::string key, int64_t offset,
                                                                int64_t bytes,
                                                                const HostPinning& pinning,
                                                                int64_t max_bytes) {
  if (offset < 0 || bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " and bytes ", bytes, " must not be negative"));
  }
  std::shared_ptr<SharedRegion> region(new SharedRegion());
  region->name_ = std::move(name);
  region->key_ = std::move(key);
  region->fd_ = shm_open(region->key_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (region->fd_ < 0) return OpenError(region->key_, errno);
  struct stat st = {};
  if (fstat(region->fd_, &st) != 0) {
    return absl::InternalError(absl::StrCat("fstat(", region->key_, "): ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(region->key_, " is not a shared-memory object (not a regular file)"));
  }
  const int64_t size = st.st_size;
  if (bytes == 0) bytes = size - offset;
  if (offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat(bytes, " bytes from offset ", offset, " of ",
                                              region->key_, " asked for; it has ", size));
  }
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the range of ", region->key_, " from offset ", offset,
                     " is empty (the object has ", size, " bytes)"));
  }
  if (bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the region would take ", bytes, " bytes; ", max_bytes,
        " are left of what this server maps (--shm_max_bytes)"));
  }
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t map_from = offset / page * page;
  region->mapped_ = static_cast<size_t>(offset - map_from + bytes);
  void* base = mmap(nullptr, region->mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd_,
                    static_cast<off_t>(map_from));
  if (base == MAP_FAILED) {
    const int error = errno;
    if (error == ENOMEM) {
      return absl::ResourceExhaustedError(
          absl::StrCat("mapping ", bytes, " bytes of ", region->key_, ": ", std::strerror(error)));
    }
    return absl::InternalError(absl::StrCat("mmap(", region->key_, "): ", std::strerror(error)));
  }
  region->base_ = base;
  region->data_ = static_cast<char*>(base) + (offset - map_from);
  region->offset_ = offset;
  region->bytes_ = bytes;
  region->guard_slot_ = BusFaultGuard::Add(region->data_, static_cast<size_t>(bytes));
  if (region->guard_slot_ < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server already maps ", BusFaultGuard::kMaxRanges, " regions; unregister some"));
  }
  if (pinning.pin && pinning.pin(region->data_, static_cast<size_t>(bytes))) {
    region->page_locked_ = true;
    region->unpin_ = pinning.unpin;
  }
  region->registered_ = absl::Now();
  return region;
}

SharedRegion::~SharedRegion() {
  if (page_locked_ && unpin_) unpin_(data_);
  BusFaultGuard::Remove(guard_slot_);
  if (base_ != nullptr) munmap(base_, mapped_);
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<char*> SharedRegion::Slice(absl::string_view field, int64_t offset,
                                          int64_t bytes) const {
  if (offset < 0 || bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": offset ", offset, " and bytes ",
                                                   bytes, " must not be negative"));
  }
  if (offset > bytes_ || bytes > bytes_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(field, ": ", bytes, " bytes from offset ", offset,
                                              " of region '", name_, "', which has ", bytes_));
  }
  if (absl::Status s = CheckIntact(); !s.ok()) return s;
  return data_ + offset;
}

absl::Status SharedRegion::CheckIntact() const {
  if (unregistered_.load(std::memory_order_acquire)) {
    return absl::AbortedError(
        absl::StrCat("region '", name_, "' was unregistered while the call used it"));
  }
  struct stat st = {};
  const int64_t needed = offset_ + bytes_;
  if (fstat(fd_, &st) == 0 && st.st_size < needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "region '", name_, "': ", key_, " was truncated to ", st.st_size, " bytes; the region needs ",
        needed, " (unregister it, and register it again once it is whole)"));
  }
  if (BusFaultGuard::Faults(guard_slot_) > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "region '", name_, "': ", key_,
        " was truncated while a call used it; its contents here are no longer the object's "
        "(unregister it and register it again)"));
  }
  return absl::OkStatus();
}

}  // namespace gemmd
