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
#include "server/devices/cuda/cuda_device_internal.h"
#include "server/devices/cuda/pinned_host_allocator.h"
#include "server/observability/log.h"


namespace gemmd {
namespace {

using cuda_device_internal::AlignUp;
using cuda_device_internal::CapabilityString;
using cuda_device_internal::Fp32Output;
using cuda_device_internal::kRegionAlignment;

// Zeros to fill the gaps between aligned regions, so that the copy-in of a whole launch
// is one contiguous device range (one DMA per staging slot).
constexpr char kGapFill[kRegionAlignment] = {};
// A region at least this large in page-locked memory is moved by its own DMA; smaller
// ones are gathered through the staging ring, where many share one DMA.
constexpr int64_t kDirectDmaBytes = kPageLockedMinBytes;

// Bytes of item j's piece of a region (LayoutOf gives the starts and the total).
int64_t Span(const std::vector<int64_t>& offsets, int64_t region_bytes, size_t j) {
  return (j + 1 < offsets.size() ? offsets[j + 1] : region_bytes) - offsets[j];
}

// Every host buffer the launch reads or writes is there: a null one would crash the
// staging memcpy instead of failing the launch.
absl::Status CheckHostBuffers(const DeviceLaunch& launch) {
  static const HostPieces kNone;
  for (size_t j = 0; j < launch.items.size(); ++j) {
    const GemmProblem& p = launch.items[j].problem;
    const GemmOperands& host = launch.items[j].host;
    const HostPieces& pieces = launch.items[j].pieces ? *launch.items[j].pieces : kNone;
    static const DeviceOperands kNotResident;
    const DeviceOperands& r = launch.items[j].resident ? *launch.items[j].resident : kNotResident;
    // A stacked launch reads B once, the first item's.
    const bool needs_b = !launch.stacked || j == 0;
    const bool missing =
        (p.ElementsA() > 0 && host.a == nullptr && pieces.a.empty() && r.a == nullptr) ||
        (needs_b && p.ElementsB() > 0 && host.b == nullptr && pieces.b.empty() && r.b == nullptr) ||
        (p.beta != 0.0f && p.ElementsCIn() > 0 && host.c_in == nullptr && pieces.c_in.empty() &&
         r.c_in == nullptr) ||
        (p.ElementsC() > 0 && host.c_out == nullptr && r.c_out == nullptr);
    if (missing) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", j, " of the launch is missing a host operand buffer"));
    }
  }
  return absl::OkStatus();
}

// The resident B every item of the launch reads (the device memory of one tensor), or
// null when B comes from the host.
const void* SharedResidentB(const DeviceLaunch& launch) {
  const void* b = nullptr;
  for (const LaunchItem& item : launch.items) {
    const void* mine = item.resident != nullptr ? item.resident->b : nullptr;
    if (mine == nullptr || (b != nullptr && mine != b)) return nullptr;
    b = mine;
    if (launch.stacked) break;
  }
  return b;
}

}  // namespace

// Regions are arena offsets until the arena is acquired.
struct CudaDevice::ArenaPlan {
  // `host` is device memory (a resident tensor) when `device`: copied on the device.
  struct In {
    const void* host;
    int64_t at;
    int64_t bytes;
    bool device = false;
  };
  struct Out {
    int64_t at;
    void* host;
    int64_t bytes;
    bool device = false;
  };
  std::vector<In> in;  // in arena order
  std::vector<Out> out;
  int64_t workspace_at = 0;
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
  absl::StatusOr<ArenaPlan> plan;
  if (const auto* dense = dynamic_cast<const gpu::GpuGemmKernel*>(launch.kernel)) {
    plan = PlanDense(launch, *dense);
  } else if (const auto* quantized = dynamic_cast<const gpu::QuantizedGemmKernel*>(launch.kernel)) {
    plan = PlanQuantized(launch, *quantized);
  } else {
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

absl::StatusOr<CudaDevice::ArenaPlan> CudaDevice::PlanDense(
    const DeviceLaunch& launch, const gpu::GpuGemmKernel& kernel) const {
  if (absl::Status s = CheckHostBuffers(launch); !s.ok()) return s;
  const GemmProblem& problem = launch.problem;
  // Arena: A | B | C_in | C | workspace, each region 256-byte aligned. Items sit back to
  // back inside each region, which is the dense layout of the packed problem. With an
  // FP16/BF16 result the kernel works on FP32 copies: C_in is widened into C_in32 and C32
  // is rounded into C afterwards (element offsets are the same in both).
  const LaunchLayout layout = LayoutOf(launch.items);
  const bool reads_c = problem.beta != 0.0f;
  const bool converts = problem.c_type != DataType::kFloat32;
  const GemmProblem fp32 = Fp32Output(problem);
  const int64_t c_in_elements = reads_c ? problem.ElementsCIn() : 0;
  const int64_t c_elements = problem.ElementsC();
  // B read where it is resident, or once for a stacked launch (the items share it).
  const void* shared_b = SharedResidentB(launch);
  const int64_t b_region = shared_b != nullptr ? 0
                           : launch.stacked    ? Span(layout.b_offset, layout.b_bytes, 0)
                                               : layout.b_bytes;
  const int64_t a_at = 0;
  const int64_t b_at = AlignUp(a_at + layout.a_bytes);
  const int64_t c_in_at = AlignUp(b_at + b_region);
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

  ArenaPlan plan;
  const std::vector<LaunchItem>& items = launch.items;
  static const DeviceOperands kNotResident;
  auto resident = [&items](size_t j) -> const DeviceOperands& {
    return items[j].resident != nullptr ? *items[j].resident : kNotResident;
  };
  // An operand resident on the device, at `host`, or (host null) in `pieces` back to back.
  auto add_in = [&plan](const void* on_device, const void* host,
                        const std::vector<absl::string_view>* pieces, int64_t at, int64_t bytes) {
    if (on_device != nullptr) {
      plan.in.push_back({on_device, at, bytes, true});
      return;
    }
    if (host != nullptr || pieces == nullptr) {
      plan.in.push_back({host, at, bytes});
      return;
    }
    for (absl::string_view piece : *pieces) {
      const int64_t n = std::min<int64_t>(bytes, static_cast<int64_t>(piece.size()));
      if (n <= 0) break;
      plan.in.push_back({piece.data(), at, n});
      at += n;
      bytes -= n;
    }
  };
  for (size_t j = 0; j < items.size(); ++j) {
    add_in(resident(j).a, items[j].host.a, items[j].pieces ? &items[j].pieces->a : nullptr,
           a_at + layout.a_offset[j], Span(layout.a_offset, layout.a_bytes, j));
  }
  if (shared_b == nullptr) {
    for (size_t j = 0; j < (launch.stacked ? 1 : items.size()); ++j) {
      add_in(resident(j).b, items[j].host.b, items[j].pieces ? &items[j].pieces->b : nullptr,
             b_at + layout.b_offset[j], Span(layout.b_offset, layout.b_bytes, j));
    }
  }
  if (reads_c) {
    for (size_t j = 0; j < items.size(); ++j) {
      add_in(resident(j).c_in, items[j].host.c_in,
             items[j].pieces ? &items[j].pieces->c_in : nullptr, c_in_at + layout.c_in_offset[j],
             Span(layout.c_in_offset, layout.c_in_bytes, j));
    }
  }
  // The C region is contiguous across items, so it leaves in as few DMAs as the slots
  // allow and is scattered to each item's own buffer on the host (or, for a result kept
  // resident, copied on the device).
  for (size_t j = 0; j < items.size(); ++j) {
    const int64_t bytes = Span(layout.c_offset, layout.c_bytes, j);
    if (resident(j).c_out != nullptr) {
      plan.out.push_back({c_at + layout.c_offset[j], resident(j).c_out, bytes, true});
    } else {
      plan.out.push_back({c_at + layout.c_offset[j], items[j].host.c_out, bytes});
    }
  }
  plan.workspace_at = end;
  // The one-argument WorkspaceBytes assumes 16-byte-aligned operands, which the region
  // starts are; the exact count below can only differ if that assumption broke.
  plan.workspace_bytes = kernel.WorkspaceBytes(fp32);
  auto operands = [=](char* arena) {
    return GemmOperands{arena + a_at, shared_b != nullptr ? shared_b : arena + b_at,
                        reads_c ? arena + c_in32_at : nullptr, arena + c32_at};
  };
  plan.exact_workspace = [&kernel, fp32, operands](char* arena) {
    return kernel.WorkspaceBytes(fp32, operands(arena));
  };
  plan.launch = [&kernel, problem, fp32, operands, converts, reads_c, c_in_at, c_in32_at, c_at,
                 c32_at, c_in_elements, c_elements](char* arena, void* workspace,
                                                    size_t workspace_bytes, cudaStream_t stream) {
    if (converts && reads_c) {
      if (absl::Status s = gpu::LaunchConvert(problem.c_type, arena + c_in_at, DataType::kFloat32,
                                              arena + c_in32_at, c_in_elements, stream);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = kernel.Launch(fp32, operands(arena), workspace, workspace_bytes, stream);
        !s.ok()) {
      return s;
    }
    if (!converts) return absl::OkStatus();
    return gpu::LaunchConvert(DataType::kFloat32, arena + c32_at, problem.c_type, arena + c_at,
                              c_elements, stream);
  };
  return plan;
}

absl::StatusOr<CudaDevice::ArenaPlan> CudaDevice::PlanQuantized(
    const DeviceLaunch& launch, const gpu::QuantizedGemmKernel& kernel) const {
  const std::vector<LaunchItem>& items = launch.items;
  const bool stacked = launch.stacked_quantized != nullptr;
  if ((!stacked && items.size() != 1) || items.front().quantized == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", std::string(kernel.name()),
        " runs one QuantizedMatmul at a time, or a stack of them against one weight"));
  }
  // The launch's operands: the one item's, or the stack's (m = every item's rows).
  const QuantizedOperands& q = stacked ? *launch.stacked_quantized : *items.front().quantized;
  static const DeviceOperands kNotResident;
  auto resident = [&items](size_t j) -> const DeviceOperands& {
    return items[j].resident != nullptr ? *items[j].resident : kNotResident;
  };
  for (size_t j = 0; j < items.size(); ++j) {
    if (items[j].host.c_out == nullptr && resident(j).c_out == nullptr) {
      return absl::InvalidArgumentError("quantized launch without a result buffer");
    }
  }
  // A as the kernel reads it: packed codes and scales, or dense rows (a quantized A is
  // dequantized at admission for such a kernel). A stack's A is dense: the items' rows.
  const bool packed_a = kernel.reads_packed_a();
  if (packed_a != q.a.has_value() || (stacked && packed_a)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel ", std::string(kernel.name()), packed_a ? " reads a quantized A" : " reads a dense A"));
  }
  // Resident operands are read where they are (cudaMalloc'd, so aligned as the kernels
  // need); the rest is staged into the arena: A | A scales | B codes | B scales | C.
  const DeviceOperands& first = resident(0);
  const bool b_resident = first.b != nullptr;
  const bool a_resident = !stacked && first.a != nullptr;
  const bool c_resident = !stacked && first.c_out != nullptr;
  int64_t a_bytes = 0;
  for (const LaunchItem& item : items) {
    const QuantizedOperands& mine = *item.quantized;
    a_bytes += static_cast<int64_t>(packed_a ? mine.a->data.size() : mine.a_dense.size());
  }
  const absl::string_view a_scales = packed_a ? q.a->scales : absl::string_view();
  const int64_t a_at = 0;
  const int64_t a_scales_at = AlignUp(a_at + (a_resident ? 0 : a_bytes));
  const int64_t b_at =
      AlignUp(a_scales_at + (a_resident ? 0 : static_cast<int64_t>(a_scales.size())));
  const int64_t b_scales_at =
      AlignUp(b_at + (b_resident ? 0 : static_cast<int64_t>(q.b.data.size())));
  const int64_t c_at =
      AlignUp(b_scales_at + (b_resident ? 0 : static_cast<int64_t>(q.b.scales.size())));
  const int64_t c_bytes = q.m * q.n * static_cast<int64_t>(sizeof(float));
  ArenaPlan plan;
  if (!a_resident) {
    int64_t at = a_at;
    for (const LaunchItem& item : items) {
      const QuantizedOperands& mine = *item.quantized;
      const absl::string_view rows = packed_a ? mine.a->data : mine.a_dense;
      plan.in.push_back({rows.data(), at, static_cast<int64_t>(rows.size())});
      at += static_cast<int64_t>(rows.size());
    }
    if (packed_a) {
      plan.in.push_back({a_scales.data(), a_scales_at, static_cast<int64_t>(a_scales.size())});
    }
  }
  if (!b_resident) {
    plan.in.push_back({q.b.data.data(), b_at, static_cast<int64_t>(q.b.data.size())});
    plan.in.push_back({q.b.scales.data(), b_scales_at, static_cast<int64_t>(q.b.scales.size())});
  }
  // Each item's rows of C, in order (one item: all of C).
  int64_t c_offset = 0;
  for (size_t j = 0; j < items.size(); ++j) {
    const int64_t bytes = items[j].quantized->m * q.n * static_cast<int64_t>(sizeof(float));
    if (!c_resident) {
      if (resident(j).c_out != nullptr) {
        plan.out.push_back({c_at + c_offset, resident(j).c_out, bytes, true});
      } else {
        plan.out.push_back({c_at + c_offset, items[j].host.c_out, bytes});
      }
    }
    c_offset += bytes;
  }
  plan.workspace_at = AlignUp(c_at + (c_resident ? 0 : c_bytes));
  plan.workspace_bytes = kernel.WorkspaceBytes(q);
  const QuantizedOperands* operands = &q;
  const void* a_dev = a_resident ? first.a : nullptr;
  const void* a_scales_dev = a_resident ? first.a_scales : nullptr;
  const void* b_dev = b_resident ? first.b : nullptr;
  const void* b_scales_dev = b_resident ? first.b_scales : nullptr;
  void* c_dev = c_resident ? first.c_out : nullptr;
  plan.launch = [&kernel, operands, a_at, a_scales_at, b_at, b_scales_at, c_at, a_dev,
                 a_scales_dev, b_dev, b_scales_dev, c_dev](
                    char* arena, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    const gpu::QuantizedDeviceOperands d{
        a_dev != nullptr ? a_dev : arena + a_at,
        a_dev != nullptr ? a_scales_dev : arena + a_scales_at,
        b_dev != nullptr ? b_dev : arena + b_at,
        b_dev != nullptr ? b_scales_dev : arena + b_scales_at,
        reinterpret_cast<float*>(c_dev != nullptr ? c_dev : arena + c_at)};
    return kernel.Launch(*operands, d, workspace, workspace_bytes, stream);
  };
  return plan;
}

absl::Status CudaDevice::Execute(const ArenaPlan& plan, Lane& lane, int lane_index,
                                 LaunchTimes* times) {
  size_t workspace_bytes = plan.workspace_bytes;
  char* arena = nullptr;
  bool placed = false;
  for (int attempt = 0; attempt < 2 && !placed; ++attempt) {
    absl::StatusOr<void*> acquired =
        pool_->Acquire(lane_index, plan.workspace_at + static_cast<int64_t>(workspace_bytes));
    if (!acquired.ok()) {
      if (acquired.status().code() == absl::StatusCode::kInternal) {
        return Fault(acquired.status());
      }
      return acquired.status();  // RESOURCE_EXHAUSTED: the device is fine
    }
    arena = static_cast<char*>(*acquired);
    const size_t exact = plan.exact_workspace ? plan.exact_workspace(arena) : workspace_bytes;
    if (exact <= workspace_bytes) {
      placed = true;
    } else {
      workspace_bytes = exact;
    }
  }
  if (!placed) {
    return absl::InternalError("the kernel asks for a different workspace at each address");
  }
  void* workspace = workspace_bytes > 0 ? arena + plan.workspace_at : nullptr;

  // One wait per launch: the phases are enqueued back to back on the lane's stream and
  // timed there by events; the host blocks only where copy-out needs the results.
  const cudaStream_t stream = lane.stream.get();
  const absl::Time start = absl::Now();
  // The launch's host buffers must outlive every DMA that reads or writes them: a
  // launch that fails after enqueueing copies waits for them before it returns.
  auto drain = [stream](absl::Status status) {
    (void)cudaStreamSynchronize(stream);
    return status;
  };
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventRecord(lane.start, stream)));

  // Copy-in: a large region in page-locked memory (the server's request buffers) goes by
  // its own DMA, straight from the host buffer; every other region goes through the
  // staging ring, in arena order with the alignment gaps filled, so the ring sends the
  // range as few DMAs as possible.
  std::vector<HostToDevice> in;
  in.reserve(plan.in.size() * 2);
  int64_t covered = -1;  // arena bytes up to `covered` are in `in`, or -1 for none
  for (const ArenaPlan::In& region : plan.in) {
    if (region.device) {
      GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(
          cudaMemcpyAsync(arena + region.at, region.host, static_cast<size_t>(region.bytes),
                          cudaMemcpyDeviceToDevice, stream)));
      covered = -1;  // no gap fill across it: the staged bytes land after this copy
      continue;
    }
    if (region.bytes >= kDirectDmaBytes && IsPageLocked(region.host)) {
      GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(
          cudaMemcpyAsync(arena + region.at, region.host, static_cast<size_t>(region.bytes),
                          cudaMemcpyHostToDevice, stream)));
      continue;
    }
    if (covered >= 0 && region.at > covered && region.at - covered <= kRegionAlignment) {
      in.push_back({kGapFill, arena + covered, static_cast<size_t>(region.at - covered)});
    }
    in.push_back({region.host, arena + region.at, static_cast<size_t>(region.bytes)});
    covered = region.at + region.bytes;
  }
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyIn(in, stream));
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventRecord(lane.copied, stream)));

  const absl::Status launched = plan.launch(arena, workspace, workspace_bytes, stream);
  if (!launched.ok()) {
    // INTERNAL is a CUDA error; the rest are the kernel's checks of the operands.
    if (launched.code() == absl::StatusCode::kInternal) return Fault(drain(launched));
    return drain(launched);
  }
  GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaEventRecord(lane.computed, stream)));

  // Copy-out likewise: large page-locked results by their own DMA, the rest staged (the
  // ring waits for each slot's DMA, which comes after the kernel in stream order).
  std::vector<DeviceToHost> out;
  out.reserve(plan.out.size());
  bool direct_out = false;
  for (const ArenaPlan::Out& region : plan.out) {
    if (region.device) {
      GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(
          cudaMemcpyAsync(region.host, arena + region.at, static_cast<size_t>(region.bytes),
                          cudaMemcpyDeviceToDevice, stream)));
      direct_out = true;
      continue;
    }
    if (region.bytes >= kDirectDmaBytes && IsPageLocked(region.host)) {
      GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(
          cudaMemcpyAsync(region.host, arena + region.at, static_cast<size_t>(region.bytes),
                          cudaMemcpyDeviceToHost, stream)));
      direct_out = true;
      continue;
    }
    out.push_back({arena + region.at, region.host, static_cast<size_t>(region.bytes)});
  }
  GEMMD_FAULT_IF_ERROR(lane.staging->CopyOut(out, stream));
  if (direct_out || out.empty()) {
    GEMMD_FAULT_IF_ERROR(GEMMD_CUDA_STATUS(cudaStreamSynchronize(stream)));
  }

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
