// Error plumbing shared by CudaDevice's source files (not a public header).
#ifndef GEMMD_SERVER_CUDA_CUDA_DEVICE_ERRORS_H_
#define GEMMD_SERVER_CUDA_CUDA_DEVICE_ERRORS_H_

#include "absl/status/status.h"
#include "kernels/cuda/cuda_status.h"

// A cudaError_t as a Status naming the call (OK for cudaSuccess).
#define GEMMD_CUDA_STATUS(expr) ::gemmd::gpu::CudaErrorToStatus((expr), #expr, __FILE__, __LINE__)

// Inside CudaDevice: a failed CUDA step is a device fault.
#define GEMMD_FAULT_IF_ERROR(expr)                                    \
  do {                                                                \
    const ::absl::Status gemmd_fault_status_ = (expr);                \
    if (!gemmd_fault_status_.ok()) return Fault(gemmd_fault_status_); \
  } while (false)

#endif  // GEMMD_SERVER_CUDA_CUDA_DEVICE_ERRORS_H_
