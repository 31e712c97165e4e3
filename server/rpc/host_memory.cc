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
  if (status.ok()) bytes_ = bytes;
  return status;
}

ResultBuffer::~ResultBuffer() {
  if (owner_ != nullptr) owner_->Return(std::move(data_), capacity_);
}

std::shared_ptr<HostMemory> HostMemory::Create(int64_t max_bytes, int64_t max_pooled_bytes,
                                               size_t max_pooled_buffers) {
  return std::shared_ptr<HostMemory>(
      new HostMemory(max_bytes, max_pooled_bytes, max_pooled_buffers));
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
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Take(bytes, &freed); !s.ok()) return s;
  }
  return Reservation(shared_from_this(), bytes);
}

absl::StatusOr<std::unique_ptr<ResultBuffer>> HostMemory::AcquireResult(size_t bytes) {
  std::vector<Idle> freed;
  std::unique_ptr<char[]> data;
  size_t capacity = 0;
  {
    absl::MutexLock lock(&mu_);
    // The smallest idle buffer that holds it without wasting more than its size.
    size_t best = idle_.size();
    for (size_t i = 0; i < idle_.size(); ++i) {
      const size_t c = idle_[i].capacity;
      if (c >= bytes && c / 2 <= bytes && (best == idle_.size() || c < idle_[best].capacity)) {
        best = i;
      }
    }
    if (best < idle_.size()) {
      data = std::move(idle_[best].data);
      capacity = idle_[best].capacity;
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
      pooled_ -= static_cast<int64_t>(capacity);
      reserved_ += static_cast<int64_t>(capacity);  // idle -> in use: no new memory
    } else {
      if (absl::Status s = Take(static_cast<int64_t>(bytes), &freed); !s.ok()) return s;
      capacity = bytes;
    }
  }
  // Allocated outside the lock; new char[] leaves the bytes uninitialized (the device
  // writes every one), so no page is touched here.
  if (data == nullptr) data.reset(new char[std::max<size_t>(capacity, 1)]);
  return std::unique_ptr<ResultBuffer>(
      new ResultBuffer(shared_from_this(), std::move(data), capacity, bytes));
}

void HostMemory::Return(std::unique_ptr<char[]> data, size_t capacity) {
  const int64_t c = static_cast<int64_t>(capacity);
  {
    absl::MutexLock lock(&mu_);
    reserved_ -= c;
    const bool fits_pool =
        pooled_ + c <= max_pooled_bytes_ && idle_.size() < max_pooled_buffers_;
    const bool fits_cap = max_bytes_ == 0 || reserved_ + pooled_ + c <= max_bytes_;
    if (fits_pool && fits_cap && data != nullptr) {
      idle_.push_back({std::move(data), capacity});
      pooled_ += c;
      return;
    }
  }
  data.reset();  // outside the lock: munmap of a large buffer takes a while
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
