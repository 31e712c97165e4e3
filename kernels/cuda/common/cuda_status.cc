#include "kernels/cuda/common/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace gemmd::gpu {

absl::Status CudaErrorToStatus(cudaError_t error, const char* expr, const char* file,
                               int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  // The error is now reported through the status: take it out of the runtime's
  // last-error slot too (non-sticky errors only; a sticky one stays), so a later
  // launcher's cudaGetLastError() does not report it a second time as its own.
  (void)cudaGetLastError();
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  return absl::InternalError(absl::StrCat("CUDA error: ", expr, " at ", file, ":", line,
                                          " on device ", device, ": ",
                                          cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

}  // namespace gemmd::gpu
