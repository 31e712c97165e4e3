// The skinny weight-only kernel's streaming path on Hopper's warpgroup MMA
// (quant_skinny_wgmma_sm90a.cu, built when the architecture list has 90): NVFP4 B, FP16 A
// of 9-16 rows, the ring and grid of quant_skinny_stream.h with one wgmma m64n16k16 per
// warpgroup and K step in place of the warps' mma.sync. Host-only header; compiles with
// g++.
#ifndef GEMMD_KERNELS_CUDA_QUANT_SKINNY_WGMMA_H_
#define GEMMD_KERNELS_CUDA_QUANT_SKINNY_WGMMA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/quant_gemm.h"
#include "kernels/cuda/quant_skinny_stream.h"

namespace gemmd::gpu {

// As LaunchSkinnyStream, for 9 <= m <= 16 on compute capability 9.0 (FAILED_PRECONDITION,
// nothing enqueued, elsewhere).
absl::Status LaunchSkinnyWgmma(const void* a, int64_t m, const DeviceQuantizedWeight& b,
                               float* c, int k_splits_override, bool fill_required,
                               cudaStream_t stream);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANT_SKINNY_WGMMA_H_
