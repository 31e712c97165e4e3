#include "server/rpc/host_memory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemmd {

Reservation::Reservation(Reservation&& other) noexcept
    : owner_(std::move(other.owner_)), bytes_(std::exchange(other.bytes_, 0)) {}

Reservation& Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->Give(bytes_);
    owner_ = std::move(other.owner_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Reservation::~Reservation() {
  if (owner_ != nullptr) owner_->Give(bytes_);
}

absl::Status Reservation::Resize(int64_t bytes) {
  if (owner_ == nullptr) return absl::FailedPreconditionError("resize of an empty reservation");
  if (bytes <= bytes_) {
    owner_->Give(bytes_ - bytes);
    bytes_ = bytes;
    return absl::OkStatus();
  }
  std::vector<HostMemory::Idle> freed;
  absl::Status status;
  {
    absl::MutexLock lock(&owner_->mu_);
    status = owner_->Take(bytes - bytes_, &freed);
  }
  owner_->FreeAll(&freed);
  if (status.ok()) bytes_ = bytes;
  return status;
}

HostBuffer::~HostBuffer() {
  if (owner_ != nullptr) owner_->Return(data_, capacity_);
}

std::shared_ptr<HostMemory> HostMemory::Create(int64_t max_bytes, int64_t max_pooled_bytes,
                                               size_t max_pooled_buffers,
                                               std::shared_ptr<HostAllocator> allocator) {
  return std::shared_ptr<HostMemory>(
      new HostMemory(max_bytes, max_pooled_bytes, max_pooled_buffers, std::move(allocator)));
}

HostMemory::~HostMemory() { FreeAll(&idle_); }

void HostMemory::FreeAll(std::vector<Idle>* idle) {
  for (Idle& buffer : *idle) allocator_->Free(buffer.data, buffer.capacity);
  idle->clear();
}

absl::Status HostMemory::Take(int64_t bytes, std::vector<Idle>* freed) {
  if (max_bytes_ > 0) {
    if (reserved_ + bytes > max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "server busy: requests hold ", reserved_, " bytes, this one needs ", bytes,
          " more (--max_inflight_bytes=", max_bytes_, "); retry later"));
    }
    // Idle buffers make room for work, oldest first.
    size_t drop = 0;
    while (reserved_ + pooled_ + bytes > max_bytes_ && drop < idle_.size()) {
      pooled_ -= static_cast<int64_t>(idle_[drop].capacity);
      ++drop;
    }
    if (drop > 0) {
      std::move(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(drop),
                std::back_inserter(*freed));
      idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(drop));
    }
  }
  reserved_ += bytes;
  peak_ = std::max(peak_, reserved_ + pooled_);
  return absl::OkStatus();
}

void HostMemory::Give(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_ -= bytes;
}

absl::StatusOr<Reservation> HostMemory::Reserve(int64_t bytes) {
  std::vector<Idle> freed;  // freed after the lock is dropped
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = Take(bytes, &freed);
  }
  FreeAll(&freed);
  if (!status.ok()) return status;
  return Reservation(shared_from_this(), bytes);
}

absl::StatusOr<std::unique_ptr<HostBuffer>> HostMemory::AcquireBuffer(size_t bytes) {
  return AcquireBuffer(bytes, nullptr);
}

absl::StatusOr<std::unique_ptr<HostBuffer>> HostMemory::AcquireBuffer(size_t bytes,
                                                                       Reservation* from) {
  // What `from` can pay: its bytes move to the buffer (counted the same), if they cover
  // the capacity the buffer gets.
  auto pay_from = [&](size_t capacity) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (from == nullptr || from->owner_.get() != this ||
        from->bytes_ < static_cast<int64_t>(capacity)) {
      return false;
    }
    from->bytes_ -= static_cast<int64_t>(capacity);
    return true;
  };
  std::vector<Idle> freed;
  char* data = nullptr;
  size_t capacity = 0;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    // The smallest idle buffer that holds it without wasting more than its size. The
    // newest first: with requests of one size (the common case) the last one returned
    // fits exactly, so the search ends at once, and its memory is the warmest.
    size_t best = idle_.size();
    for (size_t i = idle_.size(); i-- > 0;) {
      const size_t c = idle_[i].capacity;
      if (c >= bytes && c / 2 <= bytes && (best == idle_.size() || c < idle_[best].capacity)) {
        best = i;
        if (c == std::max<size_t>(bytes, 1)) break;
      }
    }
    if (best < idle_.size()) {
      data = idle_[best].data;
      capacity = idle_[best].capacity;
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
      pooled_ -= static_cast<int64_t>(capacity);
      // idle -> in use: no new memory; counted anew unless `from` pays
      if (!pay_from(capacity)) reserved_ += static_cast<int64_t>(capacity);
    } else {
      capacity = std::max<size_t>(bytes, 1);
      if (!pay_from(capacity)) status = Take(static_cast<int64_t>(capacity), &freed);
    }
  }
  FreeAll(&freed);
  if (!status.ok()) return status;
  // Allocated outside the lock, uninitialized (whoever fills it writes every byte).
  if (data == nullptr) {
    data = allocator_->Allocate(capacity);
    if (data == nullptr) {
      Give(static_cast<int64_t>(capacity));
      return absl::ResourceExhaustedError(
          absl::StrCat("the server could not allocate ", capacity, " bytes of host memory",
                       allocator_->page_locked(capacity) ? " (page-locked)" : "",
                       "; retry later"));
    }
  }
  return std::unique_ptr<HostBuffer>(new HostBuffer(shared_from_this(), data, capacity, bytes));
}

void HostMemory::Recycle(std::unique_ptr<HostBuffer> buffer, Reservation* into) {
  if (buffer == nullptr) return;
  if (into == nullptr || into->owner_.get() != this) return;  // destroyed the usual way
  char* const data = buffer->data_;
  const size_t capacity = buffer->capacity_;
  buffer->owner_.reset();  // its destructor gives nothing back: done here
  buffer.reset();
  bool pooled = false;
  {
    absl::MutexLock lock(&mu_);
    into->bytes_ += static_cast<int64_t>(capacity);  // still counted, now as the reservation's
    pooled = PoolLocked(data, capacity);
  }
  if (!pooled) allocator_->Free(data, capacity);
}

bool HostMemory::PoolLocked(char* data, size_t capacity) {
  const int64_t c = static_cast<int64_t>(capacity);
  const bool fits_pool = pooled_ + c <= max_pooled_bytes_ && idle_.size() < max_pooled_buffers_;
  const bool fits_cap = max_bytes_ == 0 || reserved_ + pooled_ + c <= max_bytes_;
  if (!fits_pool || !fits_cap || data == nullptr) return false;
  idle_.push_back({data, capacity});
  pooled_ += c;
  return true;
}

void HostMemory::Return(char* data, size_t capacity) {
  {
    absl::MutexLock lock(&mu_);
    reserved_ -= static_cast<int64_t>(capacity);
    if (PoolLocked(data, capacity)) return;
  }
  // Outside the lock: unmapping (or unpinning) a large buffer takes a while.
  if (data != nullptr) allocator_->Free(data, capacity);
}

bool HostMemory::Full() const {
  absl::MutexLock lock(&mu_);
  return max_bytes_ > 0 && reserved_ >= max_bytes_;
}

int64_t HostMemory::reserved_bytes() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

int64_t HostMemory::pooled_bytes() const {
  absl::MutexLock lock(&mu_);
  return pooled_;
}

int64_t HostMemory::peak_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

size_t HostMemory::pooled_buffers() const {
  absl::MutexLock lock(&mu_);
  return idle_.size();
}

}  // namespace gemmd
