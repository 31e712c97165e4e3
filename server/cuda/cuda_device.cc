#include "server/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/quant_square.h"
#include "server/cuda/cuda_device_internal.h"
#include "server/log.h"


namespace gemmd {
namespace {

// `p` with FP32 output: what the kernels compute for any requested output type.
GemmProblem Fp32Output(GemmProblem p) {
  p.c_type = DataType::kFloat32;
  return p;
}

using cuda_device_internal::AlignUp;
using cuda_device_internal::kRegionAlignment;

// Zeros to fill the gaps between aligned regions, so that the copy-in of a whole batch
// is one contiguous device range (one DMA per staging slot).
constexpr char kGapFill[kRegionAlignment] = {};

// "9.0" from 90.
std::string CapabilityString(int capability) {
  return absl::StrCat(capability / 10, ".", capability % 10);
}

// Bytes of job j's piece of a region (LayoutOf gives the starts and the total).
int64_t Span(const std::vector<int64_t>& offsets, int64_t region_bytes, size_t j) {
  return (j + 1 < offsets.size() ? offsets[j + 1] : region_bytes) - offsets[j];
}

// Every host buffer the batch reads or writes is there: a null one would crash the
// staging memcpy instead of failing the batch.
absl::Status CheckHostBuffers(const Batch& batch) {
  for (size_t j = 0; j < batch.jobs.size(); ++j) {
    const GemmProblem& p = batch.jobs[j]->problem;
    const GemmOperands& host = batch.jobs[j]->operands;
    const bool missing = (p.ElementsA() > 0 && host.a == nullptr) ||
                         (p.ElementsB() > 0 && host.b == nullptr) ||
                         (p.beta != 0.0f && p.ElementsCIn() > 0 && host.c_in == nullptr) ||
                         (p.ElementsC() > 0 && host.c_out == nullptr);
    if (missing) {
      return absl::InvalidArgumentError(
          absl::StrCat("job ", j, " of the batch is missing a host operand buffer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

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

  std::unique_ptr<CudaDevice> device(new CudaDevice(ordinal, options, *std::move(caps)));
  device->wgmma_ = gpu::SquareWgmmaAvailable();  // asks the current device: this one
  // Also creates the context, so the free memory is measured with it in place.
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t cap = options.memory_limit_bytes > 0
                          ? options.memory_limit_bytes
                          : static_cast<int64_t>(static_cast<double>(free_bytes) * 0.9);
  device->pool_ = std::make_unique<DeviceMemoryPool>(cap, options.lanes);
  device->copier_ = std::make_unique<HostCopier>(std::max(0, options.copy_threads));
  device->lanes_.reserve(static_cast<size_t>(options.lanes));
  for (int i = 0; i < options.lanes; ++i) {
    absl::StatusOr<gpu::CudaStream> stream = gpu::CudaStream::Create();
    if (!stream.ok()) return stream.status();
    absl::StatusOr<std::unique_ptr<StagingRing>> staging =
        StagingRing::Create(options.staging_slots, options.staging_chunk_bytes,
                            device->copier_.get());
    if (!staging.ok()) return staging.status();
    device->pinned_bytes_ += static_cast<int64_t>((*staging)->pinned_bytes());
    device->lanes_.push_back(Lane{*std::move(stream), *std::move(staging)});
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
  for (Lane& lane : lanes_) (void)cudaStreamSynchronize(lane.stream.get());
  lanes_.clear();
  pool_.reset();
}

std::vector<KernelDescription> CudaDevice::Kernels() const {
  std::vector<KernelDescription> out;
  for (const gpu::GpuGemmKernel* k : gpu::KernelRegistry::Global().kernels()) {
    if (k->min_compute_capability() > caps_.compute_capability) continue;
    out.push_back(
        {std::string(k->name()), k->precision(), CapabilityString(k->min_compute_capability())});
  }
  return out;
}

absl::StatusOr<const gpu::GpuGemmKernel*> CudaDevice::ChooseKernel(
    const GemmProblem& requested, absl::string_view forced_kernel) const {
  // The kernels write FP32 C; FP16/BF16 results (and C inputs) are converted around them.
  const GemmProblem problem = Fp32Output(requested);
  absl::StatusOr<const gpu::GpuGemmKernel*> kernel =
      forced_kernel.empty()
          ? gpu::SelectKernel(problem, caps_)
          : gpu::ForceKernel(std::string_view(forced_kernel.data(), forced_kernel.size()), problem,
                             caps_);
  if (kernel.ok()) return kernel;
  const absl::Status& status = kernel.status();
  if (status.code() == absl::StatusCode::kNotFound) {
    std::vector<std::string> names;
    for (const KernelDescription& k : Kernels()) names.push_back(k.name);
    return absl::FailedPreconditionError(
        absl::StrCat("no kernel named '", forced_kernel,
                     "' on this server; available: ", absl::StrJoin(names, ", ")));
  }
  // A malformed problem is the caller's error; anything else means "not here".
  if (status.code() == absl::StatusCode::kInvalidArgument) return status;
  return absl::FailedPreconditionError(status.message());
}

absl::StatusOr<std::string> CudaDevice::SelectKernel(const GemmProblem& problem,
                                                     absl::string_view forced_kernel) const {
  absl::StatusOr<const gpu::GpuGemmKernel*> kernel = ChooseKernel(problem, forced_kernel);
  if (!kernel.ok()) return kernel.status();
  return std::string((*kernel)->name());
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

absl::Status CudaDevice::RunBatch(const Batch& batch, int lane, BatchRun* run) {
  if (!healthy()) {
    return absl::UnavailableError(
        absl::StrCat("cuda:", ordinal_, " is unhealthy after an earlier fault"));
  }
  if (lane < 0 || lane >= lanes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lane ", lane, " is not in [0, ", lanes(), ") on ", description_.name));
  }
  if (batch.jobs.empty()) return absl::InvalidArgumentError("empty batch");
  // Worker threads serve any device; make this one current for every CUDA call below.
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(ordinal_);
  GEMMD_FAULT_IF_ERROR(current.status());
  return RunOnLane(batch, lanes_[static_cast<size_t>(lane)], lane, run);
}

absl::Status CudaDevice::RunOnLane(const Batch& batch, Lane& lane, int lane_index, BatchRun* run) {
  if (batch.jobs.front()->quantized != nullptr) {
    return RunQuantized(*batch.jobs.front(), lane, lane_index, run);
  }
  const GemmProblem& problem = batch.problem;
  absl::StatusOr<const gpu::GpuGemmKernel*> chosen = ChooseKernel(problem, batch.forced_kernel);
  if (!chosen.ok()) return chosen.status();
  const gpu::GpuGemmKernel& kernel = **chosen;
  run->kernel = std::string(kernel.name());
  if (absl::Status s = CheckHostBuffers(batch); !s.ok()) return s;

  // Arena: A | B | C_in | C | workspace, each region 256-byte aligned. Jobs sit back to
  // back inside each region, which is the dense layout of the packed problem. With an
  // FP16/BF16 result the kernel works on FP32 copies: C_in is widened into C_in32 and C32
  // is rounded into C afterwards (element offsets are the same in both).
  const BatchLayout layout = LayoutOf(batch.jobs);
  const bool reads_c = problem.beta != 0.0f;
  const bool converts = problem.c_type != DataType::kFloat32;
  const GemmProblem launch = Fp32Output(problem);
  const int64_t c_in_elements = reads_c ? problem.ElementsCIn() : 0;
  const int64_t c_elements = problem.ElementsC();
  const int64_t a_at = 0;
  const int64_t b_at = AlignUp(a_at + layout.a_bytes);
  const int64_t c_in_at = AlignUp(b_at + layout.b_bytes);
  // +16 bytes after each conversion target: LaunchConvert writes whole 16-byte groups.
  const int64_t c_at = AlignUp(c_in_at + layout.c_in_bytes);
  int64_t end = AlignUp(c_at + layout.c_bytes + 16);
  int64_t c_in32_at = c_in_at;  // where the kernel reads C_in and writes C
  int64_t c32_at = c_at;
  if (converts) {
    c_in32_at = end;
    end = AlignUp(c_in32_at + c_in_elements * 4 + 16);
    c32_at = end;
    end = AlignUp(c32_at + c_elements * 4);
  }
  const int64_t workspace_at = end;

  // The one-argument WorkspaceBytes assumes 16-byte-aligned operands, which the region
  // starts are; the exact count below can only differ if that assumption broke.
  size_t workspace_bytes = kernel.WorkspaceBytes(launch);
  char* arena = nullptr;
  GemmOperands device;
  bool placed = false;
  for (int attempt = 0; attempt < 2 && !placed; ++attempt) {
    absl::StatusOr<void*> acquired =
        pool_->Acquire(lane_index, workspace_at + static_cast<int64_t>(workspace_bytes));
    if (!acquired.ok()) {
      if (acquired.status().code() == absl::StatusCode::kInternal) {
        return Fault(acquired.status());
      }
      return acquired.status();  // RESOURCE_EXHAUSTED: the device is fine
    }
    arena = static_cast<char*>(*acquired);
    device.a = arena + a_at;
    device.b = arena + b_at;
    device.c_in = reads_c ? arena + c_in32_at : nullptr;
    device.c_out = arena + c32_at;
    const size_t exact = kernel.WorkspaceBytes(launch, device);
    if (exact <= workspace_bytes) {
      placed = true;
    } else {
      workspace_bytes = exact;
    }
  }
  if (!placed) {
    return absl::InternalError(
        absl::StrCat("kernel ", run->kernel, " asks for a different workspace at each address"));
  }
  void* workspace = workspace_bytes > 0 ? arena + workspace_at : nullptr;

  // Copy-in: every input region, in arena order, with the alignment gaps filled so the
  // whole range is contiguous and the staging ring sends it as few DMAs as possible.
  std::vector<HostToDevice> in;
  in.reserve(batch.jobs.size() * 3 + 3);
  int64_t covered = 0;  // arena bytes [0, covered) are in `in`
  auto add = [&](const void* host, int64_t at, int64_t bytes) {
    if (at > covered && at - covered <= kRegionAlignment) {
      in.push_back({kGapFill, arena + covered, static_cast<size_t>(at - covered)});
    }
    in.push_back({host, arena + at, static_cast<size_t>(bytes)});
    covered = at + bytes;
  };
  for (size_t j = 0; j < batch.jobs.size(); ++j) {
    add(batch.jobs[j]->operands.a, a_at + layout.a_offset[j],
        Span(layout.a_offset, layout.a_bytes, j));
  }
  for (size_t j = 0; j < batch.jobs.size(); ++j) {
    add(batch.jobs[j]->operands.b, b_at + layout.b_offset[j],
        Span(layout.b_offset, layout.b_bytes, j));
  }
  if (reads_c) {
    for (size_t j = 0; j < batch.jobs.size(); ++j) {
      add(batch.jobs[j]->operands.c_in, c_in_at + layout.c_in_offset[j],
          Span(layout.c_in_offset, layout.c_in_bytes, j));
    }
  }
  const cudaStream_t stream = lane.stream.get();
  absl::Time start = absl::Now();
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyIn(in, stream));
  // Synchronizing per phase is what makes the phase times real; the other lane keeps
  // the GPU busy meanwhile.
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(stream)));
  run->copy_in = absl::Now() - start;

  start = absl::Now();
  if (converts && reads_c) {
    GEMMD_FAULT_IF_ERROR(gpu::LaunchConvert(problem.c_type, arena + c_in_at,
                                            DataType::kFloat32, arena + c_in32_at,
                                            c_in_elements, stream));
  }
  absl::Status launched = kernel.Launch(launch, device, workspace, workspace_bytes, stream);
  if (!launched.ok()) {
    // INTERNAL is a CUDA error; the rest are the kernel's checks of the problem.
    if (launched.code() == absl::StatusCode::kInternal) return Fault(launched);
    return launched;
  }
  if (converts) {
    GEMMD_FAULT_IF_ERROR(gpu::LaunchConvert(DataType::kFloat32, arena + c32_at, problem.c_type,
                                            arena + c_at, c_elements, stream));
  }
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(stream)));
  run->compute = absl::Now() - start;

  // Copy-out: the C region is contiguous across jobs, so it leaves in as few DMAs as
  // the slots allow and is scattered to each job's own buffer on the host.
  std::vector<DeviceToHost> out;
  out.reserve(batch.jobs.size());
  for (size_t j = 0; j < batch.jobs.size(); ++j) {
    out.push_back({arena + c_at + layout.c_offset[j], batch.jobs[j]->operands.c_out,
                   static_cast<size_t>(Span(layout.c_offset, layout.c_bytes, j))});
  }
  start = absl::Now();
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyOut(out, stream));
  run->copy_out = absl::Now() - start;
  return absl::OkStatus();
}

}  // namespace gemmd
