// CUDA runtime errors as absl::Status. Host-only; compiles with g++.
//
// RETURN_IF_CUDA_ERROR(expr) evaluates a cudaError_t expression once and, on failure,
// returns absl::InternalError naming the expression, file:line, the current device and
// cudaGetErrorString from the enclosing function (which must return absl::Status or
// absl::StatusOr<T>). Kernel launches are followed by
// RETURN_IF_CUDA_ERROR(cudaGetLastError()) inside their launcher.
#ifndef GEMMD_KERNELS_CUDA_COMMON_CUDA_STATUS_H_
#define GEMMD_KERNELS_CUDA_COMMON_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace gemmd::gpu {

// INTERNAL status "CUDA error: <expr> at <file>:<line> on device <d>: <name> (<string>)".
// OK when error == cudaSuccess.
absl::Status CudaErrorToStatus(cudaError_t error, const char* expr, const char* file,
                               int line);

}  // namespace gemmd::gpu

#define RETURN_IF_CUDA_ERROR(expr)                                                     \
  do {                                                                                 \
    const cudaError_t gemmd_cuda_error_ = (expr);                                      \
    if (gemmd_cuda_error_ != cudaSuccess) {                                            \
      return ::gemmd::gpu::CudaErrorToStatus(gemmd_cuda_error_, #expr, __FILE__,       \
                                             __LINE__);                                \
    }                                                                                  \
  } while (false)

// absl::Status propagation inside the CUDA library (absl has no public macro for it).
#define GEMMD_GPU_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                 \
    ::absl::Status gemmd_gpu_status_ = (expr);                                         \
    if (!gemmd_gpu_status_.ok()) return gemmd_gpu_status_;                             \
  } while (false)

#endif  // GEMMD_KERNELS_CUDA_COMMON_CUDA_STATUS_H_
