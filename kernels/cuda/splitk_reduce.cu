// Split-K reduction: sums the FP32 partial products of the K-slices and applies the
// alpha/beta epilogue. Used by the `_splitk` variants for small M*N with large K
// (skinny M = 1..64 with N = K = 8192 in gemm-bench), where one block per output tile
// would leave most multiprocessors idle. Memory-bound: reads splits*M*N floats once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/tiled_gemm.h"

namespace gemmd::gpu::internal {
namespace {

__global__ void __launch_bounds__(256)
    SplitKReduceKernel(const float* __restrict__ partial, int splits, int64_t m, int64_t n,
                       int64_t batch, float alpha, float beta, const float* c_in,
                       int64_t stride_c_in, float* c, int64_t stride_c) {
  const int64_t mn = m * n;
  const int64_t total = batch * mn;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t item = i / mn;
    const int64_t e = i - item * mn;
    const float* p = partial + item * splits * mn + e;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum += p[s * mn];
    float v = alpha * sum;
    // beta == 0 must not read C (it may hold NaN or be unallocated).
    if (beta != 0.0f) v = fmaf(beta, c_in[item * stride_c_in + e], v);
    c[item * stride_c + e] = v;
  }
}

}  // namespace

absl::Status LaunchSplitKReduce(const float* partial, int splits, int64_t m, int64_t n,
                                int64_t batch, float alpha, float beta, const float* c_in,
                                int64_t stride_c_in, float* c, int64_t stride_c,
                                cudaStream_t stream) {
  const int64_t total = batch * m * n;
  if (total == 0) return absl::OkStatus();
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t{1} << 20);
  SplitKReduceKernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      partial, splits, m, n, batch, alpha, beta, c_in, stride_c_in, c, stride_c);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gemmd::gpu::internal
