#include "client/blas/shm_staging.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gemmd::blas {
namespace {

// Below this a copy stays on the calling thread: a thread's start costs more.
constexpr int64_t kParallelCopyBytes = int64_t{4} << 20;
// Regions grow to the next multiple of this, so that calls of about one size share one.
constexpr int64_t kGrowStep = int64_t{64} << 20;

}  // namespace

void ParallelCopy(char* dst, const char* src, int64_t bytes, int threads) {
  const int64_t pieces =
      std::min<int64_t>(std::max(1, threads), std::max<int64_t>(1, bytes / kParallelCopyBytes));
  if (pieces <= 1) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return;
  }
  const int64_t piece = (bytes + pieces - 1) / pieces;
  std::vector<std::thread> helpers;
  for (int64_t i = 1; i < pieces; ++i) {
    const int64_t at = i * piece, n = std::min(piece, bytes - at);
    if (n > 0)
      helpers.emplace_back([=] { std::memcpy(dst + at, src + at, static_cast<size_t>(n)); });
  }
  std::memcpy(dst, src, static_cast<size_t>(std::min(piece, bytes)));
  for (std::thread& t : helpers) t.join();
}

absl::StatusOr<std::unique_ptr<ShmStaging::Lease>> ShmStaging::TryAcquire(int64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return std::unique_ptr<Lease>();
  if (region_ == nullptr || region_->size() < bytes) {
    if (absl::Status s = Grow(bytes); !s.ok()) return s;
  }
  return std::unique_ptr<Lease>(new Lease(std::move(lock), region_.get(), name_));
}

void ShmStaging::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!name_.empty()) RegionClient(channel_, absl::Seconds(2)).Unregister(name_).IgnoreError();
  name_.clear();
  region_.reset();
}

absl::Status ShmStaging::Grow(int64_t bytes) {
  RegionClient regions(channel_);
  if (prefix_.empty()) {
    absl::StatusOr<std::string> prefix = regions.Prefix();
    if (!prefix.ok()) return prefix.status();
    prefix_ = *prefix;
  }
  if (!name_.empty()) {
    regions.Unregister(name_).IgnoreError();
    name_.clear();
  }
  region_.reset();
  const int64_t size = (bytes + kGrowStep - 1) / kGrowStep * kGrowStep;
  // A name already taken, as an object or on the server (by a process that had this PID,
  // here or in another PID namespace), is someone else's: the next generation's is tried.
  absl::Status status;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string tag = absl::StrCat("blas-", getpid(), "-", ++generation_);
    absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
        SharedMemoryRegion::Create(absl::StrCat("/", prefix_, tag), size);
    if (region.ok()) {
      absl::StatusOr<gemm::v1::RegionInfo> info = regions.Register(tag, (*region)->key());
      if (info.ok()) {
        region_ = *std::move(region);
        name_ = tag;
        return absl::OkStatus();
      }
      status = info.status();
    } else {
      status = region.status();
    }
    if (!absl::IsAlreadyExists(status)) break;
  }
  return status;
}

}  // namespace gemmd::blas
