#include "server/devices/cuda/cuda_catalogue.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_raii.h"
#include "kernels/cuda/quantized/quantized_kernels.h"
#include "server/devices/cuda/cuda_device_internal.h"

namespace gemmd {
namespace {

using cuda_device_internal::CapabilityString;
using cuda_device_internal::Fp32Output;

}  // namespace

std::vector<KernelDescription> CudaCatalogue::Kernels() const {
  const gpu::KernelRegistry& registry = gpu::KernelRegistry::Global();
  std::vector<KernelDescription> out;
  for (const gpu::GpuGemmKernel* k : registry.kernels()) {
    if (!k->RunsOn(caps_.compute_capability)) continue;
    out.push_back({std::string(k->name()), KernelInput::kDense, k->precision(),
                   CapabilityString(k->min_compute_capability())});
  }
  for (const gpu::QuantizedGemmKernel* k : registry.quantized()) {
    if (!k->RunsOn(caps_.compute_capability)) continue;
    out.push_back({std::string(k->name()), KernelInput::kQuantized, k->precision(),
                   CapabilityString(k->min_compute_capability())});
  }
  return out;
}

absl::StatusOr<const Kernel*> CudaCatalogue::Select(const GemmProblem& requested,
                                                    std::string_view forced) const {
  const GemmProblem problem = Fp32Output(requested);
  absl::StatusOr<const gpu::GpuGemmKernel*> kernel =
      forced.empty() ? gpu::SelectKernel(problem, caps_) : gpu::ForceKernel(forced, problem, caps_);
  if (kernel.ok()) return *kernel;
  // A malformed problem is the caller's error; anything else means "not here".
  if (kernel.status().code() == absl::StatusCode::kInvalidArgument) return kernel.status();
  return absl::FailedPreconditionError(kernel.status().message());
}

absl::StatusOr<QuantizedChoice> CudaCatalogue::SelectQuantized(const QuantizedOperands& q,
                                                               std::string_view forced) const {
  absl::StatusOr<gpu::ScopedDevice> current = gpu::ScopedDevice::Create(caps_.device);
  if (!current.ok()) return current.status();
  absl::StatusOr<const gpu::QuantizedGemmKernel*> kernel =
      forced.empty() ? gpu::SelectQuantizedKernel(q, caps_)
                     : gpu::ForceQuantizedKernel(forced, q, caps_);
  if (!kernel.ok()) return kernel.status();
  if (*kernel == nullptr) return QuantizedChoice();
  return QuantizedChoice{*kernel, /*dense_a=*/!(*kernel)->reads_packed_a()};
}

}  // namespace gemmd
