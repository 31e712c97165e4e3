#include "kernels/cuda/gpu_gemm.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/quantized/quantized_kernels.h"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu {

absl::StatusOr<DeviceCaps> QueryDeviceCaps(int device) {
  cudaDeviceProp prop{};
  RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, device));
  DeviceCaps caps;
  caps.device = device;
  caps.name = prop.name;
  caps.compute_capability = prop.major * 10 + prop.minor;
  caps.sm_count = prop.multiProcessorCount;
  caps.shared_memory_per_block_optin_bytes = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  caps.l2_cache_bytes = prop.l2CacheSize;
  caps.global_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return caps;
}

KernelRegistry::KernelRegistry(std::vector<std::unique_ptr<GpuGemmKernel>> kernels,
                               std::vector<std::unique_ptr<QuantizedGemmKernel>> quantized)
    : owned_(std::move(kernels)), quantized_owned_(std::move(quantized)) {
  for (const auto& k : owned_) view_.push_back(k.get());
  for (const auto& k : quantized_owned_) quantized_view_.push_back(k.get());
}

KernelRegistry::~KernelRegistry() = default;

const KernelRegistry& KernelRegistry::Global() {
  static const KernelRegistry* const registry = [] {
    std::vector<std::unique_ptr<GpuGemmKernel>> kernels;
    internal::AppendSimtKernels(&kernels);
    internal::AppendWmmaKernels(&kernels);
    internal::AppendDmmaKernels(&kernels);
#if defined(GEMMD_HAVE_SM90A)
    internal::AppendWgmmaKernels(&kernels);
    internal::AppendWgmmaTmaKernels(&kernels);
#endif
    return new KernelRegistry(std::move(kernels), MakeQuantizedKernels());
  }();
  return *registry;
}

const GpuGemmKernel* KernelRegistry::Find(std::string_view name) const {
  for (const GpuGemmKernel* k : view_) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

const QuantizedGemmKernel* KernelRegistry::FindQuantized(std::string_view name) const {
  for (const QuantizedGemmKernel* k : quantized_view_) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

absl::StatusOr<const GpuGemmKernel*> ForceKernel(std::string_view name,
                                                 const GemmProblem& problem,
                                                 const DeviceCaps& caps,
                                                 const KernelRegistry& registry) {
  const GpuGemmKernel* kernel = registry.Find(name);
  if (kernel == nullptr) {
    return absl::NotFoundError(absl::StrCat("no GPU kernel named '", internal::Sv(name), "'"));
  }
  if (!kernel->RunsOn(caps.compute_capability)) {
    return absl::FailedPreconditionError(
        absl::StrCat(internal::Sv(name), " does not run on compute capability ",
                     caps.compute_capability, " (device ", caps.device, ", ", caps.name,
                     "); it needs ", kernel->min_compute_capability(),
                     kernel->RunsOn(kernel->min_compute_capability() + 10) ? " or newer"
                                                                           : " exactly"));
  }
  absl::Status status = kernel->Check(problem);
  if (!status.ok()) {
    // Whatever the reason, forcing a variant that cannot run it is a precondition
    // failure of the request, with the variant's explanation.
    return absl::FailedPreconditionError(status.message());
  }
  return kernel;
}

std::vector<std::string> DescribeKernels(const KernelRegistry& registry) {
  std::vector<std::string> out;
  for (const GpuGemmKernel* k : registry.kernels()) {
    out.push_back(absl::StrCat(internal::Sv(k->name()), " (", internal::Sv(PrecisionName(k->precision())), ", ",
                               internal::Sv(DataTypeName(k->operand_type())), " operands, sm_",
                               k->min_compute_capability(), "+)"));
  }
  return out;
}

}  // namespace gemmd::gpu
