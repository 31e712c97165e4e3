// The CUDA backend's KernelCatalogue: the registry of kernels/cuda (dense and quantized)
// and its selection (gpu::SelectKernel, gpu::SelectQuantizedKernel) for the server's
// GPUs. With GPUs of different kinds it chooses for the least capable one, so a job can
// run on whichever GPU takes it.
#ifndef GEMMD_SERVER_DEVICES_CUDA_CUDA_CATALOGUE_H_
#define GEMMD_SERVER_DEVICES_CUDA_CUDA_CATALOGUE_H_

#include "kernels/cuda/gpu_gemm.h"
#include "server/devices/kernel_catalogue.h"

namespace gemmd {

class CudaCatalogue : public KernelCatalogue {
 public:
  explicit CudaCatalogue(gpu::DeviceCaps caps) : caps_(std::move(caps)) {}

  std::vector<KernelDescription> Kernels() const override;
  // The kernels write FP32 C; an FP16/BF16 result is converted by the device after the
  // launch, so the choice is made for the FP32-output problem.
  absl::StatusOr<const Kernel*> Select(const GemmProblem& problem,
                                       std::string_view forced) const override;
  // Makes caps.device current on the calling thread (occupancy queries, cached).
  absl::StatusOr<QuantizedChoice> SelectQuantized(const QuantizedOperands& q,
                                                  std::string_view forced) const override;

 private:
  const gpu::DeviceCaps caps_;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_DEVICES_CUDA_CUDA_CATALOGUE_H_
