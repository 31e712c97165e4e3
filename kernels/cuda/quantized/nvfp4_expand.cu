// ExpandNvfp4ToHalf (nvfp4_expand.h): one thread per 32 values, 16 code bytes and their
// two scale bytes in, 64 bytes of FP16 out; a grid-stride loop over the operand. A
// memory-bound pass: 4.5 bits read and 16 written a value.
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/quantized/nvfp4_decode.cuh"
#include "kernels/cuda/quantized/nvfp4_expand.h"

namespace gemmd::gpu {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    ExpandKernel(const uint4* __restrict__ codes, const uint16_t* __restrict__ scales,
                 int64_t chunks, uint4* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < chunks;
       i += int64_t{gridDim.x} * kThreads) {
    // Chunk i: values 32i .. 32i + 31 (k % 32 == 0: one row's), scale blocks 2i and 2i + 1.
    const uint4 q = codes[i];
    const uint32_t sc = scales[i];
    const uint32_t s0 = internal::nvfp4::ScaleHalf2(sc & 0xFFu);
    const uint32_t s1 = internal::nvfp4::ScaleHalf2(sc >> 8);
    uint4* const o = out + 4 * i;
    o[0] = internal::nvfp4::DecodeWord<false>(q.x, s0);
    o[1] = internal::nvfp4::DecodeWord<false>(q.y, s0);
    o[2] = internal::nvfp4::DecodeWord<false>(q.z, s1);
    o[3] = internal::nvfp4::DecodeWord<false>(q.w, s1);
  }
}

}  // namespace

absl::Status ExpandNvfp4ToHalf(const void* codes, const void* scales, int64_t m, int64_t k,
                               void* out, cudaStream_t stream) {
  if (m < 1 || k < 32 || k % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expanding NVFP4 to FP16 needs m >= 1 and k a positive multiple of 32; got [",
                     m, ", ", k, "]"));
  }
  if (codes == nullptr || scales == nullptr || out == nullptr || !Aligned16(codes) ||
      !Aligned16(scales) || !Aligned16(out)) {
    return absl::InvalidArgumentError(
        "expanding NVFP4 to FP16 needs codes, scales and output 16-byte aligned");
  }
  const int64_t chunks = m * k / 32;
  const int64_t blocks = std::min<int64_t>((chunks + kThreads - 1) / kThreads, int64_t{1} << 16);
  ExpandKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint4*>(codes), static_cast<const uint16_t*>(scales), chunks,
      static_cast<uint4*>(out));
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gemmd::gpu
