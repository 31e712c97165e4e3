// Page-locked host staging for the CUDA backend: a fixed ring of pinned slots through
// which a batch's operands go to the device and its results come back (pinned
// buffers from a pool, never cudaMallocHost per request).
//
// Why stage at all: the callers' buffers (gRPC messages) are pageable, and a pageable
// cudaMemcpyAsync is synchronous and goes through the driver's own small bounce buffer.
// Gathering a batch's many small operands into one pinned slot turns them into one DMA;
// splitting a large operand into slot-sized chunks overlaps the host memcpy of chunk i+1
// with the DMA of chunk i.
//
// Ownership and threads: a StagingRing owns its pinned memory and events and belongs to
// one device (the one current at Create) and one user at a time (one per lane); it is
// not thread-safe. Slots are reused round-robin across calls; each slot's event says
// when its last DMA finished, so a slot is never refilled while the device still reads
// or writes it.
#ifndef GEMMD_SERVER_DEVICES_CUDA_PINNED_STAGING_H_
#define GEMMD_SERVER_DEVICES_CUDA_PINNED_STAGING_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/devices/host_copier.h"

namespace gemmd {

// `bytes` from pageable host memory to device memory.
struct HostToDevice {
  const void* host = nullptr;
  void* device = nullptr;
  size_t bytes = 0;
};

// `bytes` from device memory to pageable host memory.
struct DeviceToHost {
  const void* device = nullptr;
  void* host = nullptr;
  size_t bytes = 0;
};

class StagingRing {
 public:
  // Pins slots * slot_bytes of host memory (one cudaMallocHost) and creates one event
  // per slot on the current device. INVALID_ARGUMENT for slots < 1 or slot_bytes == 0;
  // INTERNAL for CUDA errors (e.g. the pinned allocation fails). Host-side copies into
  // and out of the slots go through `copier` (several threads) when it is not null; it
  // must outlive the ring.
  // With `blocking_sync`, a wait for a slot sleeps instead of spinning.
  static absl::StatusOr<std::unique_ptr<StagingRing>> Create(int slots = 4,
                                                             size_t slot_bytes = 4 << 20,
                                                             HostCopier* copier = nullptr,
                                                             bool blocking_sync = false);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Enqueues the copy of every segment on `stream`. Segments whose device destinations
  // follow each other without a gap are gathered into the same slot, so they travel as
  // one DMA; larger ones are split across slots. Returns once everything is enqueued
  // (the host buffers may then be reused; the device data is there once `stream` is
  // synchronized). May block until a slot's previous DMA is done. INTERNAL on CUDA
  // errors.
  absl::Status CopyIn(const std::vector<HostToDevice>& segments, cudaStream_t stream);

  // Copies every segment to host memory through the slots, pipelined: up to slots()
  // chunks are in flight while earlier ones are unpacked. Segments whose device sources
  // follow each other without a gap share a DMA. Work already enqueued on `stream` runs
  // first (stream order). Returns when all bytes are in the host buffers; INTERNAL on
  // CUDA errors (the host buffers then hold partial results).
  absl::Status CopyOut(const std::vector<DeviceToHost>& segments, cudaStream_t stream);

  size_t pinned_bytes() const { return slot_bytes_ * slots_.size(); }
  size_t slot_bytes() const { return slot_bytes_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  // DMAs enqueued so far, both directions (tests: coalescing is what keeps it low).
  int64_t dmas() const { return dmas_; }

 private:
  // Where a byte range of a slot goes once the slot's D2H copy is done.
  struct Piece {
    size_t slot_offset;
    void* host;
    size_t bytes;
  };
  struct Slot {
    char* data = nullptr;
    cudaEvent_t done = nullptr;  // recorded after the slot's last DMA
    std::vector<Piece> pieces;   // CopyOut: what to unpack from it
  };

  StagingRing(size_t slot_bytes, char* pinned, HostCopier* copier)
      : slot_bytes_(slot_bytes), pinned_(pinned), copier_(copier) {}
  void HostCopy(const std::vector<HostCopier::Task>& tasks);

  // The next slot in ring order, once its previous DMA has finished.
  absl::StatusOr<Slot*> NextFreeSlot();
  // Waits for `slot`'s D2H copy and scatters its pieces to their host buffers.
  absl::Status Unpack(Slot& slot);

  const size_t slot_bytes_;
  char* const pinned_;  // all slots, one allocation
  HostCopier* const copier_;
  std::vector<Slot> slots_;
  size_t next_ = 0;  // ring position of the next slot to fill
  int64_t dmas_ = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_PINNED_STAGING_H_
