// Split-K reduction: sums the FP32 partial products of the K-slices and applies the
// alpha/beta epilogue. Used by the `_splitk` variants for small M*N with large K
// (skinny M = 1..64 with N = K = 8192 in gemm-bench), where one block per output tile
// would leave most multiprocessors idle. Memory-bound: reads splits*M*N floats once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/dense/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

// grid.y walks batch items, x the M*N outputs of one item (no 64-bit division).
__global__ void __launch_bounds__(256)
    SplitKReduceKernel(const float* __restrict__ partial, int splits, int64_t mn,
                       int64_t batch, float alpha, float beta, const float* c_in,
                       int64_t stride_c_in, float* c, int64_t stride_c) {
  for (int64_t item = blockIdx.y; item < batch; item += gridDim.y) {
    const float* p_item = partial + item * splits * mn;
    for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < mn;
         e += int64_t{gridDim.x} * blockDim.x) {
      float sum = 0.0f;
      for (int s = 0; s < splits; ++s) sum += p_item[s * mn + e];
      float v = alpha * sum;
      // beta == 0 must not read C (it may hold NaN or be unallocated).
      if (beta != 0.0f) v = fmaf(beta, c_in[item * stride_c_in + e], v);
      c[item * stride_c + e] = v;
    }
  }
}

}  // namespace

absl::Status LaunchSplitKReduce(const float* partial, int splits, int64_t m, int64_t n,
                                int64_t batch, float alpha, float beta, const float* c_in,
                                int64_t stride_c_in, float* c, int64_t stride_c,
                                cudaStream_t stream) {
  const int64_t mn = m * n;
  if (batch == 0 || mn == 0) return absl::OkStatus();
  const int threads = 256;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((mn + threads - 1) / threads, 1 << 16)),
                  static_cast<unsigned>(std::min<int64_t>(batch, 65535)));
  SplitKReduceKernel<<<grid, threads, 0, stream>>>(partial, splits, mn, batch, alpha, beta,
                                                   c_in, stride_c_in, c, stride_c);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gemmd::gpu::internal
