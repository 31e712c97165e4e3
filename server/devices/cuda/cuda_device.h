// One GPU as a Device for the batcher (docs/ARCHITECTURE.md): the CUDA kernels of
// kernels/cuda behind per-lane streams, pinned staging rings and device memory arenas.
//
// A launch runs as copy-in (the items' operands into one arena, by DMA straight from the
// page-locked buffers they were placed in, or gathered through pinned staging: for a
// dense launch regions A | B | C_in | C | workspace, so a batch's items are back to back,
// the dense strided-batch layout one launch serves; for a quantized one A | A scales |
// B codes | B scales | C | workspace, the packed bytes as they came), compute (one
// launch) and copy-out (the C region scattered to each item's c_out). Each lane has its
// own stream, staging ring and arena, so batches on different lanes run at once and one's
// copies overlap another's compute.
//
// Threads: Run may be called concurrently for different lanes (one caller per
// lane); everything else is thread-safe. A CUDA fault (any CUDA error of a copy, launch
// or synchronization other than out-of-memory) poisons the whole context, so the device
// then stays unhealthy: the faulting launch gets INTERNAL, later ones UNAVAILABLE.
#ifndef GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_H_
#define GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/common/cuda_raii.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/quantized/quantized_kernels.h"
#include "server/devices/cuda/arena_plan.h"
#include "server/devices/cuda/device_memory_pool.h"
#include "server/devices/cuda/pinned_staging.h"
#include "server/devices/device.h"
#include "server/devices/host_copier.h"

namespace gemmd {

struct CudaDeviceOptions {
  // Device memory cap of the pool (--device_memory_limit_bytes); 0 = 90% of the
  // device's free memory when the device is opened.
  int64_t memory_limit_bytes = 0;
  // Concurrent batches (each with its own stream, staging ring and arena).
  int lanes = 2;
  // Pinned staging per lane: staging_slots slots of staging_chunk_bytes each.
  size_t staging_chunk_bytes = size_t{4} << 20;
  int staging_slots = 4;
  // Threads that help the lanes' host copies into and out of staging (HostCopier).
  int copy_threads = 3;
  // Whether a thread waiting for the GPU sleeps (true) or spins (false, CUDA's default
  // with few GPUs; --cuda_sync). Spinning keeps a core busy per waiting lane but answers
  // sooner, and for small requests costs no more CPU per request than the sleep and
  // wake-up (docs/BENCHMARKS.md, "Transport").
  bool blocking_sync = false;
  // Device memory the tensor store may take (--tensor_store_bytes): a default pool cap
  // (memory_limit_bytes 0) leaves it out.
  int64_t resident_bytes = 0;
};

class CudaDevice : public Device {
 public:
  // Opens CUDA device `ordinal`: creates its context, streams, staging rings and the
  // (still empty) memory pool. INVALID_ARGUMENT for bad options; INTERNAL for CUDA
  // errors (bad ordinal, no driver, pinned allocation failure).
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal,
                                                            const CudaDeviceOptions& options);
  ~CudaDevice() override;

  const DeviceDescription& description() const override { return description_; }
  // What kernel selection knows about this GPU (the CudaCatalogue's input).
  const gpu::DeviceCaps& caps() const { return caps_; }

  int lanes() const override { return static_cast<int>(lanes_.size()); }
  // Half a lane's share of the memory cap: the rest is room for the kernel workspace.
  int64_t max_batch_bytes() const override { return pool_->lane_share_bytes() / 2; }

  // Dense launches (gpu::GpuGemmKernel) and quantized ones (gpu::QuantizedGemmKernel)
  // alike: operands staged into the lane's arena, the launch, C copied out. Status:
  // RESOURCE_EXHAUSTED when the launch does not fit the lane's share of the cap or the
  // GPU is out of memory; INTERNAL on a CUDA fault (the device is then unhealthy);
  // UNAVAILABLE once unhealthy; INVALID_ARGUMENT / FAILED_PRECONDITION for a launch the
  // kernel refuses (an empty launch, a lane out of range, a missing host buffer, a
  // kernel that is not a CUDA one).
  absl::Status Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) override;

  // Dense operands may come as the pieces they arrived in: the staging ring gathers them.
  bool gathers_pieces() const override { return true; }

  bool healthy() const override { return healthy_.load(std::memory_order_acquire); }
  DeviceMemoryUsage memory() const override;

  // Resident tensors in this GPU's memory (cudaMalloc, outside the pool: the pool's cap
  // leaves room for the store's, CudaDeviceOptions::resident_bytes). Copies go through
  // the calling thread's default stream, so they never wait for a lane's launches.
  absl::StatusOr<void*> AllocateResident(int64_t bytes) override;
  bool PinHost(void* memory, size_t bytes) override;
  void UnpinHost(void* memory) override;
  absl::Status FreeResident(void* memory, int64_t bytes) override;
  // cudaMalloc hands out at least 512 bytes at a time.
  int64_t ResidentFootprint(int64_t bytes) const override;
  absl::Status WriteResident(void* resident, const void* host, size_t bytes) override;
  // Gathered into a page-locked bounce buffer, then one DMA per buffer's worth.
  absl::Status WriteResidentRuns(void* resident,
                                 const std::vector<absl::string_view>& runs) override;
  absl::Status ReadResident(void* host, const void* resident, size_t bytes) override;
  bool resident_in_host_memory() const override { return false; }
  // In device memory, a band at a time through a band of scratch taken for the call.
  absl::Status RelayoutResident(QuantFormat format, int64_t rows, int64_t k, void* data,
                                void* scales, WeightLayout layout) override;

 private:
  struct Lane {
    gpu::CudaStream stream;
    std::unique_ptr<StagingRing> staging;
    // Phase boundaries of the lane's current launch, timed on the GPU: the host waits
    // once per launch, not once per phase.
    cudaEvent_t start = nullptr, copied = nullptr, computed = nullptr;
  };
  // One launch: its arena's copies (arena_plan.h) and how the kernel runs on them.
  struct LaunchPlan;
  // A lane's arena acquired for one launch, with the kernel's workspace in it.
  struct Arena {
    char* base = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
  };

  CudaDevice(int ordinal, const CudaDeviceOptions& options, gpu::DeviceCaps caps);

  // The plans of the two kinds of launch: the arena (PlanDenseArena, PlanQuantizedArena)
  // and the kernel's launch on it.
  absl::StatusOr<LaunchPlan> PlanDense(const DeviceLaunch& launch,
                                       const gpu::GpuGemmKernel& kernel) const;
  absl::StatusOr<LaunchPlan> PlanQuantized(const DeviceLaunch& launch,
                                           const gpu::QuantizedGemmKernel& kernel) const;
  // Execute's phases, on one lane (the device is current): the arena from the pool, the
  // operands in, the launch, C out. A failed CUDA step is a fault.
  absl::Status Execute(const LaunchPlan& plan, Lane& lane, int lane_index, LaunchTimes* times);
  absl::StatusOr<Arena> AcquireArena(const LaunchPlan& plan, int lane_index);
  absl::Status CopyIn(const ArenaCopies& copies, char* arena, Lane& lane);
  absl::Status CopyOut(const ArenaCopies& copies, const char* arena, Lane& lane);
  // Marks the device unhealthy (logging the first fault) and returns the INTERNAL status
  // the launch reports.
  absl::Status Fault(const absl::Status& cuda_error);

  const int ordinal_;
  const CudaDeviceOptions options_;
  const gpu::DeviceCaps caps_;
  DeviceDescription description_;
  std::unique_ptr<HostCopier> copier_;  // shared by the lanes' rings; outlives them
  std::vector<Lane> lanes_;
  std::unique_ptr<DeviceMemoryPool> pool_;
  int64_t pinned_bytes_ = 0;
  std::atomic<bool> healthy_{true};
  // Page-locked buffers for uploads into resident memory, one per uploading thread at a
  // time (kept for reuse; freed with the device).
  absl::Mutex bounce_mu_;
  std::vector<void*> bounce_free_ ABSL_GUARDED_BY(bounce_mu_);
  std::vector<void*> bounce_all_ ABSL_GUARDED_BY(bounce_mu_);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_H_
