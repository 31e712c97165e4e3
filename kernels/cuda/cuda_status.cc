#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace gemmd::gpu {

absl::Status CudaErrorToStatus(cudaError_t error, const char* expr, const char* file,
                               int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  int device = -1;
  // Must not clear a sticky error or fail again: cudaGetDevice only reads the context.
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  return absl::InternalError(absl::StrCat("CUDA error: ", expr, " at ", file, ":", line,
                                          " on device ", device, ": ",
                                          cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

}  // namespace gemmd::gpu
