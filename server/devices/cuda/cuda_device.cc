#include "server/devices/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/quantized/quant_relayout.h"
#include "server/devices/cuda/arena_plan.h"
#include "server/devices/cuda/cuda_device_internal.h"
#include "server/devices/cuda/pinned_host_allocator.h"
#include "server/observability/log.h"


namespace gemmd {
namespace {

using cuda_device_internal::CapabilityString;
using cuda_device_internal::Fp32Output;

// Zeros to fill the gaps between aligned regions, so that the copy-in of a whole launch
// is one contiguous device range (one DMA per staging slot).
constexpr char kGapFill[kRegionAlignment] = {};
// An operand or result above this size in page-locked memory moves by DMA straight from
// or into its buffer (the pool's blocks start above it); smaller ones go through the
// staging ring, where many share one DMA and a host copy is cheaper than a DMA's set-up.
constexpr int64_t kDirectDmaMinBytes = kPinnedBlockMinBytes;

// One copy between page-locked host memory and device memory, either way.
struct Dma {
  void* to;
  const void* from;
  size_t bytes;
};

// Enqueues `dmas` on `stream`, after the work before them: several as one
// cudaMemcpyBatchAsync, which the copy engines run with less of a pause between copies
// than one cudaMemcpyAsync each (a batch's operands and results lie in pooled blocks
// that are seldom next to each other).
absl::Status EnqueueDmas(const std::vector<Dma>& dmas, cudaStream_t stream) {
  if (dmas.empty()) return absl::OkStatus();
  if (dmas.size() > 1) {
    std::vector<void*> to(dmas.size());
    std::vector<const void*> from(dmas.size());
    std::vector<size_t> bytes(dmas.size());
    for (size_t i = 0; i < dmas.size(); ++i) {
      to[i] = dmas[i].to;
      from[i] = dmas[i].from;
      bytes[i] = dmas[i].bytes;
    }
    cudaMemcpyAttributes in_stream_order{};
    in_stream_order.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attribute_from = 0;  // every copy takes the one attribute
    const cudaError_t batched =
        cudaMemcpyBatchAsync(to.data(), from.data(), bytes.data(), dmas.size(), &in_stream_order,
                             &attribute_from, 1, stream);
    // A driver without batches, or one that refuses this batch (neither error is
    // sticky): one copy each, which any driver takes.
    if (batched != cudaErrorNotSupported && batched != cudaErrorInvalidValue) {
      return GEMMD_CUDA_STATUS(batched);
    }
    (void)cudaGetLastError();
  }
  for (const Dma& dma : dmas) {
    if (absl::Status s = GEMMD_CUDA_STATUS(
            cudaMemcpyAsync(dma.to, dma.from, dma.bytes, cudaMemcpyDefault, stream));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

// One launch: its arena (arena_plan.h) and how the kernel runs on it.
struct CudaDevice::LaunchPlan {
  ArenaCopies copies;
  size_t workspace_bytes = 0;
  // The exact workspace for the placed operands (dense kernels may need more where an
  // operand is misaligned); null when workspace_bytes is exact.
  std::function<size_t(char* arena)> exact_workspace;
  // Enqueues the launch on `stream` over the placed regions.
  std::function<absl::Status(char* arena, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream)>
      launch;
};

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal,
                                                               const CudaDeviceOptions& options) {
  if (options.lanes < 1 || options.staging_slots < 1 || options.staging_chunk_bytes == 0 ||
      options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device options need lanes >= 1, staging_slots >= 1, staging_chunk_bytes > 0 "
        "and memory_limit_bytes >= 0; got ",
        options.lanes, ", ", options.staging_slots, ", ", options.staging_chunk_bytes, ", ",
        options.memory_limit_bytes));
  }
  absl::StatusOr<gpu::DeviceCaps> caps = gpu::QueryDeviceCaps(ordinal);
  if (!caps.ok()) return caps.status();
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal);
  if (!current.ok()) return current.status();

  // Before anything waits on this device: how its waits behave (the primary context takes
  // the flags even when already initialized).
  RETURN_IF_CUDA_ERROR(cudaSetDeviceFlags(options.blocking_sync ? cudaDeviceScheduleBlockingSync
                                                                : cudaDeviceScheduleSpin));
  std::unique_ptr<CudaDevice> device(new CudaDevice(ordinal, options, *std::move(caps)));
  // Also creates the context, so the free memory is measured with it in place.
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t cap =
      options.memory_limit_bytes > 0
          ? options.memory_limit_bytes
          : std::max<int64_t>(int64_t{256} << 20,
                              static_cast<int64_t>(static_cast<double>(free_bytes) * 0.9) -
                                  options.resident_bytes);
  device->pool_ = std::make_unique<DeviceMemoryPool>(cap, options.lanes);
  device->copier_ = std::make_unique<HostCopier>(std::max(0, options.copy_threads));
  device->lanes_.reserve(static_cast<size_t>(options.lanes));
  for (int i = 0; i < options.lanes; ++i) {
    absl::StatusOr<gpu::CudaStream> stream = gpu::CudaStream::Create();
    if (!stream.ok()) return stream.status();
    absl::StatusOr<std::unique_ptr<StagingRing>> staging =
        StagingRing::Create(options.staging_slots, options.staging_chunk_bytes,
                            device->copier_.get(), options.blocking_sync);
    if (!staging.ok()) return staging.status();
    device->pinned_bytes_ += static_cast<int64_t>((*staging)->pinned_bytes());
    device->lanes_.push_back(Lane{*std::move(stream), *std::move(staging)});
    Lane& lane = device->lanes_.back();
    const unsigned flags = options.blocking_sync ? cudaEventBlockingSync : cudaEventDefault;
    for (cudaEvent_t* event : {&lane.start, &lane.copied, &lane.computed}) {
      RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(event, flags));
    }
  }
  return device;
}

CudaDevice::CudaDevice(int ordinal, const CudaDeviceOptions& options, gpu::DeviceCaps caps)
    : ordinal_(ordinal), options_(options), caps_(std::move(caps)) {
  description_.index = ordinal;
  description_.kind = "cuda";
  description_.name = absl::StrCat("cuda:", ordinal, " (", caps_.name, ")");
  description_.compute_capability = CapabilityString(caps_.compute_capability);
  description_.memory_bytes = caps_.global_memory_bytes;
}

CudaDevice::~CudaDevice() {
  // Streams, events, pinned and device memory belong to this device's context: release
  // them with it current (the destroying thread may have another device current).
  // Failures are ignored: after a fault there is nothing better to do.
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  for (Lane& lane : lanes_) {
    (void)cudaStreamSynchronize(lane.stream.get());
    for (cudaEvent_t event : {lane.start, lane.copied, lane.computed}) {
      if (event != nullptr) (void)cudaEventDestroy(event);
    }
  }
  lanes_.clear();
  pool_.reset();
  absl::MutexLock lock(&bounce_mu_);
  for (void* buffer : bounce_all_) (void)cudaFreeHost(buffer);
}

DeviceMemoryUsage CudaDevice::memory() const {
  DeviceMemoryUsage usage;
  usage.device_pool_bytes = pool_->held_bytes();
  usage.device_limit_bytes = pool_->cap_bytes();
  usage.pinned_bytes = pinned_bytes_;
  return usage;
}

absl::Status CudaDevice::Fault(const absl::Status& cuda_error) {
  // The context is poisoned for every lane; log the first report only.
  if (healthy_.exchange(false, std::memory_order_acq_rel)) {
    Log(LogLevel::kError, "device_fault",
        {{"device", description_.name}, {"error", std::string(cuda_error.message())}});
  }
  return absl::InternalError(absl::StrCat(description_.name, " faulted: ", cuda_error.message()));
}

absl::Status CudaDevice::Run(const DeviceLaunch& launch, int lane, LaunchTimes* times) {
  if (!healthy()) {
    return absl::UnavailableError(
        absl::StrCat("cuda:", ordinal_, " is unhealthy after an earlier fault"));
  }
  if (lane < 0 || lane >= lanes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lane ", lane, " is not in [0, ", lanes(), ") on ", description_.name));
  }
  if (launch.items.empty()) return absl::InvalidArgumentError("empty launch");
  absl::StatusOr<LaunchPlan> plan;
  const gpu::GpuGemmKernel* dense = nullptr;
  const gpu::QuantizedGemmKernel* quantized = nullptr;
  if (launch.kernel != nullptr) {
    // The input says which; the cast checks that the kernel is one of this backend's.
    switch (launch.kernel->input()) {
      case KernelInput::kDense:
        dense = dynamic_cast<const gpu::GpuGemmKernel*>(launch.kernel);
        if (dense != nullptr) plan = PlanDense(launch, *dense);
        break;
      case KernelInput::kQuantized:
        quantized = dynamic_cast<const gpu::QuantizedGemmKernel*>(launch.kernel);
        if (quantized != nullptr) plan = PlanQuantized(launch, *quantized);
        break;
    }
  }
  if (dense == nullptr && quantized == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", launch.kernel == nullptr ? "(none)" : std::string(launch.kernel->name()),
        " is not a CUDA kernel"));
  }
  if (!plan.ok()) return plan.status();
  // Worker threads serve any device; make this one current for every CUDA call below.
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  GEMMD_FAULT_IF_ERROR(current.status());
  return Execute(*plan, lanes_[static_cast<size_t>(lane)], lane, times);
}

absl::StatusOr<CudaDevice::LaunchPlan> CudaDevice::PlanDense(
    const DeviceLaunch& launch, const gpu::GpuGemmKernel& kernel) const {
  absl::StatusOr<DenseArena> arena = PlanDenseArena(launch);
  if (!arena.ok()) return arena.status();
  // With an FP16/BF16 result the kernel works on FP32 copies: C_in is widened into
  // C_in32 and C32 is rounded into C afterwards.
  const GemmProblem problem = launch.problem;
  const GemmProblem fp32 = Fp32Output(problem);
  LaunchPlan plan;
  plan.copies = std::move(arena->copies);
  // The one-argument WorkspaceBytes assumes 16-byte-aligned operands, which the region
  // starts are; the exact count below can only differ if that assumption broke.
  plan.workspace_bytes = kernel.WorkspaceBytes(fp32);
  // The regions without their copies (moved into the plan): what the closures keep.
  const DenseArena regions = *std::move(arena);
  auto operands = [regions](char* base) {
    return GemmOperands{base + regions.a_at,
                        regions.resident_b != nullptr ? regions.resident_b : base + regions.b_at,
                        regions.reads_c_in ? base + regions.c_in32_at : nullptr,
                        base + regions.c32_at};
  };
  plan.exact_workspace = [&kernel, fp32, operands](char* base) {
    return kernel.WorkspaceBytes(fp32, operands(base));
  };
  plan.launch = [&kernel, problem, fp32, operands, regions](
                    char* base, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (regions.converts && regions.reads_c_in) {
      if (absl::Status s = gpu::LaunchConvert(problem.c_type, base + regions.c_in_at,
                                              DataType::kFloat32, base + regions.c_in32_at,
                                              regions.c_in_elements, stream);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = kernel.Launch(fp32, operands(base), workspace, workspace_bytes, stream);
        !s.ok()) {
      return s;
    }
    if (!regions.converts) return absl::OkStatus();
    return gpu::LaunchConvert(DataType::kFloat32, base + regions.c32_at, problem.c_type,
                              base + regions.c_at, regions.c_elements, stream);
  };
  return plan;
}

namespace {

// A launch's copy of a quantized operand in the layout its kernel reads, in the
// workspace: data, then scales (NVFP4's block scales; INT8's row scales only in the
// swap-AB layout, whose kernels read them right after the values), the whole 256-byte
// aligned; bytes 0 when the operand is already in that layout.
struct Relaid {
  int64_t bytes = 0;
  int64_t scales_at = 0;
  WeightLayout to = WeightLayout::kCanonical;
};
Relaid RelaidSize(const QuantizedOperand& x, int64_t rows, int64_t k, WeightLayout to) {
  if (x.layout == to) return {};
  const bool int8 = x.format == QuantFormat::kInt8;
  const int64_t data = AlignUp(int8 ? rows * k : rows * k / 2);
  const int64_t scales = int8 ? (to == WeightLayout::kSwapAb ? 4 * rows : 0) : rows * k / 16;
  return {AlignUp(data + scales), data, to};
}

// Re-lays out operand `x` (as `r` says) at *free_at and points *data / *scales there.
absl::Status Relay(const QuantizedOperand& x, int64_t rows, int64_t k, const Relaid& r,
                   const void** data, const void** scales, char** free_at, cudaStream_t stream) {
  if (r.bytes == 0) return absl::OkStatus();
  char* const to = *free_at;
  const bool int8 = x.format == QuantFormat::kInt8;
  char* const to_scales = int8 && r.to == WeightLayout::kCanonical ? nullptr : to + r.scales_at;
  if (r.to == WeightLayout::kSwapAb) {
    if (absl::Status s = gpu::PrepackSwapAb(x.format, rows, k, *data, *scales, to,
                                            int8 ? nullptr : to_scales, stream);
        !s.ok()) {
      return s;
    }
    if (int8) {
      RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(to_scales, *scales, static_cast<size_t>(4 * rows),
                                           cudaMemcpyDeviceToDevice, stream));
    }
  } else if (absl::Status s =
                 gpu::UnpackSwapAb(x.format, rows, k, *data, *scales, to, to_scales, stream);
             !s.ok()) {
    return s;
  }
  *data = to;
  if (to_scales != nullptr) *scales = to_scales;
  *free_at += r.bytes;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CudaDevice::LaunchPlan> CudaDevice::PlanQuantized(
    const DeviceLaunch& launch, const gpu::QuantizedGemmKernel& kernel) const {
  absl::StatusOr<QuantizedArena> arena =
      PlanQuantizedArena(launch, kernel.name(), kernel.reads_packed_a());
  if (!arena.ok()) return arena.status();
  LaunchPlan plan;
  plan.copies = std::move(arena->copies);
  const QuantizedOperands& q = *arena->operands;
  // An operand in a layout the kernel does not read is re-laid out into the front of the
  // workspace first: a resident swap-AB weight unpacked for a call the swap-AB kernels do
  // not take, or a canonical weight packed for a swap-AB kernel (kernel_select.cc says
  // when that pays). A is read canonical.
  const Relaid relay_b = RelaidSize(q.b, q.n, q.k, kernel.b_layout());
  const Relaid relay_a =
      q.a.has_value() ? RelaidSize(*q.a, q.m, q.k, WeightLayout::kCanonical) : Relaid{};
  const int64_t unpacked = relay_b.bytes + relay_a.bytes;
  plan.workspace_bytes = static_cast<size_t>(unpacked) + kernel.WorkspaceBytes(q);
  const QuantizedArena regions = *std::move(arena);  // (its copies moved out above)
  plan.launch = [&kernel, regions, relay_a, relay_b](char* base, void* workspace,
                                                     size_t workspace_bytes, cudaStream_t stream) {
    auto at = [base](const void* resident, int64_t offset) -> const void* {
      return resident != nullptr ? resident : base + offset;
    };
    gpu::QuantizedDeviceOperands d{
        at(regions.resident_a, regions.a_at),
        regions.resident_a != nullptr ? regions.resident_a_scales : base + regions.a_scales_at,
        at(regions.resident_b, regions.b_at),
        regions.resident_b != nullptr ? regions.resident_b_scales : base + regions.b_scales_at,
        reinterpret_cast<float*>(regions.resident_c != nullptr ? regions.resident_c
                                                               : base + regions.c_at)};
    const QuantizedOperands& q = *regions.operands;
    char* free_at = static_cast<char*>(workspace);
    if (q.a.has_value()) {
      if (absl::Status s = Relay(*q.a, q.m, q.k, relay_a, &d.a, &d.a_scales, &free_at, stream);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = Relay(q.b, q.n, q.k, relay_b, &d.b, &d.b_scales, &free_at, stream);
        !s.ok()) {
      return s;
    }
    workspace_bytes -= static_cast<size_t>(free_at - static_cast<char*>(workspace));
    workspace = free_at;
    return kernel.Launch(q, d, workspace, workspace_bytes, stream);
  };
  return plan;
}

absl::StatusOr<CudaDevice::Arena> CudaDevice::AcquireArena(const LaunchPlan& plan,
                                                           int lane_index) {
  Arena arena;
  arena.workspace_bytes = plan.workspace_bytes;
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<void*> acquired = pool_->Acquire(
        lane_index, plan.copies.workspace_at + static_cast<int64_t>(arena.workspace_bytes));
    if (!acquired.ok()) {
      if (acquired.status().code() == absl::StatusCode::kInternal) {
        return Fault(acquired.status());
      }
      return acquired.status();  // RESOURCE_EXHAUSTED: the device is fine
    }
    arena.base = static_cast<char*>(*acquired);
    const size_t exact =
        plan.exact_workspace ? plan.exact_workspace(arena.base) : arena.workspace_bytes;
    if (exact <= arena.workspace_bytes) {
      arena.workspace =
          arena.workspace_bytes > 0 ? arena.base + plan.copies.workspace_at : nullptr;
      return arena;
    }
    arena.workspace_bytes = exact;
  }
  return absl::InternalError("the kernel asks for a different workspace at each address");
}

absl::Status CudaDevice::CopyIn(const ArenaCopies& copies, char* arena, Lane& lane) {
  // A region above kDirectDmaMinBytes in page-locked memory (the server's request
  // buffers and pooled blocks) goes by DMA straight from the host buffer, all of them in
  // one batch of copies; every other region goes through the staging ring, in arena order
  // with the alignment gaps filled, so the ring sends the range as few DMAs as possible.
  const cudaStream_t stream = lane.stream.get();
  std::vector<HostToDevice> staged;
  staged.reserve(copies.in.size() * 2);
  std::vector<Dma> dmas;
  int64_t covered = -1;  // arena bytes up to `covered` are in `staged`, or -1 for none
  for (const ArenaCopyIn& region : copies.in) {
    if (region.from_device) {
      GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(
          cudaMemcpyAsync(arena + region.at, region.from, static_cast<size_t>(region.bytes),
                          cudaMemcpyDeviceToDevice, stream)));
      covered = -1;  // no gap fill across it: the staged bytes land after this copy
      continue;
    }
    if (region.bytes > kDirectDmaMinBytes && IsPageLocked(region.from)) {
      dmas.push_back({arena + region.at, region.from, static_cast<size_t>(region.bytes)});
      continue;
    }
    if (covered >= 0 && region.at > covered && region.at - covered <= kRegionAlignment) {
      staged.push_back({kGapFill, arena + covered, static_cast<size_t>(region.at - covered)});
    }
    staged.push_back({region.from, arena + region.at, static_cast<size_t>(region.bytes)});
    covered = region.at + region.bytes;
  }
  // The direct copies first: the engines move them while the ring gathers on the host.
  GEMMD_FAULT_IF_ERROR(EnqueueDmas(dmas, stream));
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyIn(staged, stream));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyOut(const ArenaCopies& copies, const char* arena, Lane& lane) {
  // Results in page-locked memory by DMA straight into place, the rest staged (the ring
  // waits for each slot's DMA, which comes after the kernel in stream order). Results
  // that lie next to each other both in the arena and on the host, in one chunk of the
  // pool of page-locked blocks (blocks handed out in turn), share one DMA.
  const cudaStream_t stream = lane.stream.get();
  std::vector<DeviceToHost> staged;
  staged.reserve(copies.out.size());
  std::vector<Dma> dmas;   // straight into place, enqueued together
  bool on_device = false;  // a copy to a resident C was enqueued
  for (const ArenaCopyOut& region : copies.out) {
    const char* from = arena + region.at;
    const size_t bytes = static_cast<size_t>(region.bytes);
    if (region.to_device) {
      GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(
          cudaMemcpyAsync(region.to, from, bytes, cudaMemcpyDeviceToDevice, stream)));
      on_device = true;
      continue;
    }
    if (region.bytes > kDirectDmaMinBytes && IsPageLocked(region.to)) {
      Dma* last = dmas.empty() ? nullptr : &dmas.back();
      if (last != nullptr && static_cast<const char*>(last->from) + last->bytes == from &&
          static_cast<char*>(last->to) + last->bytes == region.to &&
          SamePinnedChunk(last->to, static_cast<char*>(region.to) + bytes - 1)) {
        last->bytes += bytes;
        continue;
      }
      dmas.push_back({region.to, from, bytes});
      continue;
    }
    staged.push_back({from, region.to, bytes});
  }
  GEMMD_FAULT_IF_ERROR(EnqueueDmas(dmas, stream));
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyOut(staged, stream));
  if (on_device || !dmas.empty() || staged.empty()) {
    GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(stream)));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::Execute(const LaunchPlan& plan, Lane& lane, int lane_index,
                                 LaunchTimes* times) {
  absl::StatusOr<Arena> arena = AcquireArena(plan, lane_index);
  if (!arena.ok()) return arena.status();
  // One wait per launch: the phases are enqueued back to back on the lane's stream and
  // timed there by events; the host blocks only where copy-out needs the results.
  const cudaStream_t stream = lane.stream.get();
  const absl::Time start = absl::Now();
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventRecord(lane.start, stream)));
  if (absl::Status s = CopyIn(plan.copies, arena->base, lane); !s.ok()) return s;
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventRecord(lane.copied, stream)));
  const absl::Status launched =
      plan.launch(arena->base, arena->workspace, arena->workspace_bytes, stream);
  if (!launched.ok()) {
    // The launch's host buffers must outlive every DMA that reads them: wait for the
    // copies already enqueued before returning.
    (void)cudaStreamSynchronize(stream);
    // INTERNAL is a CUDA error; the rest are the kernel's checks of the operands.
    if (launched.code() == absl::StatusCode::kInternal) return Fault(launched);
    return launched;
  }
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventRecord(lane.computed, stream)));
  if (absl::Status s = CopyOut(plan.copies, arena->base, lane); !s.ok()) return s;

  float copy_in_ms = 0, compute_ms = 0;
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventElapsedTime(&copy_in_ms, lane.start, lane.copied)));
  GEMMD_FAULT_IF_ERROR(
      GEMMD_CUDA_STATUS(cudaEventElapsedTime(&compute_ms, lane.copied, lane.computed)));
  times->copy_in = absl::Microseconds(static_cast<int64_t>(copy_in_ms * 1e3));
  times->compute = absl::Microseconds(static_cast<int64_t>(compute_ms * 1e3));
  times->copy_out = std::max(absl::ZeroDuration(),
                             absl::Now() - start - times->copy_in - times->compute);
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaDevice::AllocateResident(int64_t bytes) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return current.status();
  void* memory = nullptr;
  const cudaError_t error = cudaMalloc(&memory, static_cast<size_t>(bytes));
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it
    return absl::ResourceExhaustedError(
        absl::StrCat(description_.name, " has no ", bytes, " bytes of device memory free"));
  }
  if (error != cudaSuccess) return Fault(GEMMD_CUDA_STATUS(error));
  return memory;
}

bool CudaDevice::PinHost(void* memory, size_t bytes) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return false;
  const cudaError_t error = cudaHostRegister(memory, bytes, cudaHostRegisterPortable);
  if (error == cudaSuccess) return true;
  (void)cudaGetLastError();  // not sticky: the region stays pageable and is staged
  Log(LogLevel::kWarning, "host_pin_failed",
      {{"device", description_.name}, {"bytes", absl::StrCat(bytes)},
       {"error", cudaGetErrorString(error)}});
  return false;
}

void CudaDevice::UnpinHost(void* memory) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return;
  (void)cudaHostUnregister(memory);
  (void)cudaGetLastError();
}

absl::Status CudaDevice::FreeResident(void* memory, int64_t /*bytes*/) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return current.status();
  return GEMMD_CUDA_STATUS(cudaFree(memory));
}

int64_t CudaDevice::ResidentFootprint(int64_t bytes) const {
  return (std::max<int64_t>(bytes, 1) + 511) / 512 * 512;
}

absl::Status CudaDevice::WriteResident(void* resident, const void* host, size_t bytes) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return current.status();
  if (!healthy()) return absl::UnavailableError(absl::StrCat(description_.name, " is unhealthy"));
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaMemcpyAsync(resident, host, bytes,
                                                         cudaMemcpyHostToDevice,
                                                         cudaStreamPerThread)));
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(cudaStreamPerThread)));
  return absl::OkStatus();
}

namespace {
constexpr size_t kBounceBytes = size_t{4} << 20;
}  // namespace

absl::Status CudaDevice::WriteResidentRuns(void* resident,
                                           const std::vector<absl::string_view>& runs) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return current.status();
  if (!healthy()) return absl::UnavailableError(absl::StrCat(description_.name, " is unhealthy"));
  void* bounce = nullptr;
  {
    absl::MutexLock lock(&bounce_mu_);
    if (!bounce_free_.empty()) {
      bounce = bounce_free_.back();
      bounce_free_.pop_back();
    }
  }
  if (bounce == nullptr) {
    GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaHostAlloc(&bounce, kBounceBytes, cudaHostAllocPortable)));
    absl::MutexLock lock(&bounce_mu_);
    bounce_all_.push_back(bounce);
  }
  // Fill the buffer, send it, wait, repeat: the copy into it runs at memory speed, the
  // DMA from it at the bus's, and a chunk fits one buffer.
  absl::Status status;
  char* to = static_cast<char*>(resident);
  size_t filled = 0;
  auto flush = [&]() -> absl::Status {
    if (filled == 0) return absl::OkStatus();
    absl::Status s = GEMMD_CUDA_STATUS(
        cudaMemcpyAsync(to, bounce, filled, cudaMemcpyHostToDevice, cudaStreamPerThread));
    if (s.ok()) s = GEMMD_CUDA_STATUS(cudaStreamSynchronize(cudaStreamPerThread));
    to += filled;
    filled = 0;
    return s;
  };
  for (absl::string_view run : runs) {
    while (!run.empty() && status.ok()) {
      const size_t n = std::min(run.size(), kBounceBytes - filled);
      std::memcpy(static_cast<char*>(bounce) + filled, run.data(), n);
      filled += n;
      run.remove_prefix(n);
      if (filled == kBounceBytes) status = flush();
    }
  }
  if (status.ok()) status = flush();
  {
    absl::MutexLock lock(&bounce_mu_);
    bounce_free_.push_back(bounce);
  }
  if (!status.ok()) return Fault(status);
  return absl::OkStatus();
}

absl::Status CudaDevice::RelayoutResident(QuantFormat format, int64_t rows, int64_t k, void* data,
                                          void* scales, WeightLayout layout) {
  if (layout == WeightLayout::kCanonical) return absl::OkStatus();
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return current.status();
  if (!healthy()) return absl::UnavailableError(absl::StrCat(description_.name, " is unhealthy"));
  const size_t scratch_bytes = gpu::SwapAbRelayoutScratchBytes(format, rows, k);
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) {
    cudaGetLastError();  // an allocation failure leaves no sticky error
    return absl::ResourceExhaustedError(absl::StrCat(description_.name, " has no ", scratch_bytes,
                                                     " bytes free for the relayout's scratch"));
  }
  absl::Status s = gpu::RelayoutSwapAbInPlace(format, rows, k, data, scales, scratch, scratch_bytes,
                                              cudaStreamPerThread);
  if (s.ok()) s = GEMMD_CUDA_STATUS(cudaStreamSynchronize(cudaStreamPerThread));
  cudaFree(scratch);
  if (s.ok() || s.code() == absl::StatusCode::kInvalidArgument) return s;
  return Fault(s);
}

absl::Status CudaDevice::ReadResident(void* host, const void* resident, size_t bytes) {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  if (!current.ok()) return current.status();
  if (!healthy()) return absl::UnavailableError(absl::StrCat(description_.name, " is unhealthy"));
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaMemcpyAsync(host, resident, bytes,
                                                         cudaMemcpyDeviceToHost,
                                                         cudaStreamPerThread)));
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(cudaStreamPerThread)));
  return absl::OkStatus();
}

}  // namespace gemmd
