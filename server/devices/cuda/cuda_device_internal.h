// What the CUDA backend's source files share (not a public header): CUDA error plumbing,
// the FP32-output problem the kernels compute.
#ifndef GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_INTERNAL_H_
#define GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_INTERNAL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/gemm_problem.h"

// A cudaError_t as a Status naming the call (OK for cudaSuccess).
#define GEMMD_CUDA_STATUS(expr) ::gemmd::gpu::CudaErrorToStatus((expr), #expr, __FILE__, __LINE__)

// Inside CudaDevice: a failed CUDA step is a device fault.
#define GEMMD_FAULT_IF_ERROR(expr)                                    \
  do {                                                                \
    const ::absl::Status gemmd_fault_status_ = (expr);                \
    if (!gemmd_fault_status_.ok()) return Fault(gemmd_fault_status_); \
  } while (false)

namespace gemmd::cuda_device_internal {

// `p` with FP32 output: what the dense kernels compute for any requested output type
// but FP64's (whose C is FLOAT64 throughout).
inline GemmProblem Fp32Output(GemmProblem p) {
  if (p.c_type != DataType::kFloat64) p.c_type = DataType::kFloat32;
  return p;
}

// "9.0" from 90.
inline std::string CapabilityString(int capability) {
  return absl::StrCat(capability / 10, ".", capability % 10);
}

}  // namespace gemmd::cuda_device_internal

#endif  // GEMMD_SERVER_DEVICES_CUDA_CUDA_DEVICE_INTERNAL_H_
