#include "client_cli/shm_operands.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

constexpr int64_t kSliceAlignment = 4096;  // each slice starts on a page

int64_t AlignUp(int64_t n) { return (n + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment; }

}  // namespace

absl::StatusOr<std::unique_ptr<ShmOperands>> ShmOperands::Create(
    std::shared_ptr<grpc::Channel> channel, const std::string& key,
    const std::vector<absl::string_view>& payloads, int c_slots, int64_t c_bytes) {
  std::string object = key;
  if (object.empty()) {
    absl::StatusOr<std::string> prefix = RegionClient(channel).Prefix();
    if (!prefix.ok()) return prefix.status();
    object = absl::StrCat("/", *prefix, "cli-", getpid());
  }
  std::unique_ptr<ShmOperands> out(new ShmOperands());
  out->channel_ = channel;
  int64_t at = 0;
  for (absl::string_view p : payloads) {
    RegionSliceRef slice;
    if (!p.empty()) slice = {"", at, static_cast<int64_t>(p.size())};
    out->payloads_.push_back(slice);
    at = AlignUp(at + static_cast<int64_t>(p.size()));
  }
  out->c_at_ = at;
  out->c_bytes_ = c_bytes;
  const int64_t total = at + AlignUp(c_bytes) * c_slots;
  // One left by an earlier gemm-cli of this PID is replaced; a key the user named is
  // never removed from under its owner (ALREADY_EXISTS).
  absl::StatusOr<std::unique_ptr<SharedMemoryRegion>> region =
      SharedMemoryRegion::Create(object, total, /*replace=*/key.empty());
  if (!region.ok()) return region.status();
  out->region_ = *std::move(region);
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i].empty()) continue;
    std::memcpy(out->region_->data() + out->payloads_[i].offset, payloads[i].data(),
                payloads[i].size());
  }
  out->name_ = absl::StrCat("gemm-cli-", getpid());
  RegionClient regions(channel);
  absl::StatusOr<gemm::v1::RegionInfo> info = regions.Register(out->name_, object);
  if (absl::IsAlreadyExists(info.status())) {
    // Left by an earlier gemm-cli of this PID that did not end cleanly: not in use now.
    regions.Unregister(out->name_).IgnoreError();
    info = regions.Register(out->name_, object);
  }
  if (!info.ok()) {
    out->name_.clear();
    return info.status();
  }
  for (RegionSliceRef& slice : out->payloads_) {
    if (slice.bytes > 0) slice.region = out->name_;
  }
  return out;
}

ShmOperands::~ShmOperands() {
  if (!name_.empty()) RegionClient(channel_).Unregister(name_).IgnoreError();
}

RegionSliceRef ShmOperands::CSlot(int i) const {
  return {name_, c_at_ + AlignUp(c_bytes_) * i, c_bytes_};
}

absl::string_view ShmOperands::C(int i) const {
  return absl::string_view(region_->data() + CSlot(i).offset, static_cast<size_t>(c_bytes_));
}

}  // namespace gemmd
