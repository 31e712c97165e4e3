#include "server/devices/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"

namespace gemmd {

absl::StatusOr<std::unique_ptr<StagingRing>> StagingRing::Create(int slots, size_t slot_bytes,
                                                                 HostCopier* copier,
                                                                 bool blocking_sync) {
  if (slots < 1 || slot_bytes == 0 ||
      slot_bytes > std::numeric_limits<size_t>::max() / static_cast<size_t>(slots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging ring needs slots >= 1 and slot bytes > 0; got ", slots, " x ", slot_bytes));
  }
  void* pinned = nullptr;
  RETURN_IF_CUDA_ERROR(cudaMallocHost(&pinned, static_cast<size_t>(slots) * slot_bytes));
  // Owned from here on: the destructor frees whatever Create built before failing.
  std::unique_ptr<StagingRing> ring(
      new StagingRing(slot_bytes, static_cast<char*>(pinned), copier));
  ring->slots_.resize(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    Slot& slot = ring->slots_[static_cast<size_t>(i)];
    slot.data = ring->pinned_ + static_cast<size_t>(i) * slot_bytes;
    // The events only order and wait; timing would add a timestamp write per record.
    RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(
        &slot.done, cudaEventDisableTiming | (blocking_sync ? cudaEventBlockingSync : 0)));
  }
  return ring;
}

StagingRing::~StagingRing() {
  // The device may still be copying from or into a slot (an error path returned early):
  // let it finish before the memory goes away. Errors are ignored: nowhere to report.
  for (Slot& slot : slots_) {
    if (slot.done == nullptr) continue;
    (void)cudaEventSynchronize(slot.done);
    (void)cudaEventDestroy(slot.done);
  }
  (void)cudaFreeHost(pinned_);
}

absl::StatusOr<StagingRing::Slot*> StagingRing::NextFreeSlot() {
  Slot* slot = &slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  // An event never recorded counts as complete, so a fresh slot does not wait.
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot->done));
  slot->pieces.clear();
  return slot;
}

void StagingRing::HostCopy(const std::vector<HostCopier::Task>& tasks) {
  if (copier_ != nullptr) {
    copier_->Copy(tasks);
  } else {
    for (const HostCopier::Task& t : tasks) std::memcpy(t.dst, t.src, t.bytes);
  }
}

absl::Status StagingRing::Unpack(Slot& slot) {
  RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.done));
  std::vector<HostCopier::Task> tasks;
  tasks.reserve(slot.pieces.size());
  for (const Piece& piece : slot.pieces) {
    tasks.push_back({piece.host, slot.data + piece.slot_offset, piece.bytes});
  }
  HostCopy(tasks);
  slot.pieces.clear();
  return absl::OkStatus();
}

absl::Status StagingRing::CopyIn(const std::vector<HostToDevice>& segments, cudaStream_t stream) {
  Slot* slot = nullptr;  // being filled; its DMA is not enqueued yet
  size_t used = 0;
  char* device_start = nullptr;
  std::vector<HostCopier::Task> fill;  // host copies into `slot`, done just before its DMA
  auto enqueue = [&]() -> absl::Status {
    HostCopy(fill);
    fill.clear();
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(device_start, slot->data, used, cudaMemcpyHostToDevice, stream));
    RETURN_IF_CUDA_ERROR(cudaEventRecord(slot->done, stream));
    ++dmas_;
    slot = nullptr;
    used = 0;
    return absl::OkStatus();
  };
  for (const HostToDevice& segment : segments) {
    const char* src = static_cast<const char*>(segment.host);
    char* dst = static_cast<char*>(segment.device);
    size_t left = segment.bytes;
    while (left > 0) {
      // A full slot, or a destination that does not continue the slot's range, ends
      // the slot's DMA; enqueueing it now lets the copy run while the next slot fills.
      if (slot != nullptr && (used == slot_bytes_ || dst != device_start + used)) {
        GEMMD_GPU_RETURN_IF_ERROR(enqueue());
      }
      if (slot == nullptr) {
        absl::StatusOr<Slot*> next = NextFreeSlot();
        if (!next.ok()) return next.status();
        slot = *next;
        device_start = dst;
      }
      const size_t n = std::min(left, slot_bytes_ - used);
      fill.push_back({slot->data + used, src, n});
      used += n;
      src += n;
      dst += n;
      left -= n;
    }
  }
  if (slot != nullptr) GEMMD_GPU_RETURN_IF_ERROR(enqueue());
  return absl::OkStatus();
}

absl::Status StagingRing::CopyOut(const std::vector<DeviceToHost>& segments, cudaStream_t stream) {
  // Slots whose D2H copy is enqueued, oldest first. Slots are taken in ring order, so
  // when all are in flight the next one to fill is the oldest, unpacked first.
  std::deque<Slot*> in_flight;
  Slot* slot = nullptr;  // being planned; its DMA is not enqueued yet
  size_t used = 0;
  const char* device_start = nullptr;
  auto enqueue = [&]() -> absl::Status {
    RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(slot->data, device_start, used, cudaMemcpyDeviceToHost, stream));
    RETURN_IF_CUDA_ERROR(cudaEventRecord(slot->done, stream));
    ++dmas_;
    in_flight.push_back(slot);
    slot = nullptr;
    used = 0;
    return absl::OkStatus();
  };
  for (const DeviceToHost& segment : segments) {
    const char* src = static_cast<const char*>(segment.device);
    char* dst = static_cast<char*>(segment.host);
    size_t left = segment.bytes;
    while (left > 0) {
      if (slot != nullptr && (used == slot_bytes_ || src != device_start + used)) {
        GEMMD_GPU_RETURN_IF_ERROR(enqueue());
      }
      if (slot == nullptr) {
        if (in_flight.size() == slots_.size()) {
          GEMMD_GPU_RETURN_IF_ERROR(Unpack(*in_flight.front()));
          in_flight.pop_front();
        }
        absl::StatusOr<Slot*> next = NextFreeSlot();
        if (!next.ok()) return next.status();
        slot = *next;
        device_start = src;
      }
      const size_t n = std::min(left, slot_bytes_ - used);
      slot->pieces.push_back(Piece{used, dst, n});
      used += n;
      src += n;
      dst += n;
      left -= n;
    }
  }
  if (slot != nullptr) GEMMD_GPU_RETURN_IF_ERROR(enqueue());
  for (Slot* done : in_flight) GEMMD_GPU_RETURN_IF_ERROR(Unpack(*done));
  return absl::OkStatus();
}

}  // namespace gemmd
