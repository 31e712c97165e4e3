// ExpandNvfp4ToHalf (nvfp4_expand.h): one thread per 8 values at a time, a 4-byte code
// word and its scale byte in, 16 bytes of FP16 out, so that a warp's every load and store
// is one contiguous run (128 bytes of codes, 512 of halves); four words in flight a thread,
// a grid-stride loop over the operand. A memory-bound pass: 4.5 bits read and 16 written
// a value.
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
constexpr int kWordsAThread = 4;  // loads in flight before the first decode

__global__ void __launch_bounds__(kThreads)
    ExpandKernel(const uint32_t* __restrict__ codes, const uint8_t* __restrict__ scales,
                 int64_t words, uint4* __restrict__ out) {
  // Word w: values 8w .. 8w + 7 (k % 32 == 0: one row's), of scale block w / 2.
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t w0 = blockIdx.x * int64_t{kThreads} + threadIdx.x; w0 < words;
       w0 += kWordsAThread * stride) {
    uint32_t q[kWordsAThread], sc[kWordsAThread];
#pragma unroll
    for (int i = 0; i < kWordsAThread; ++i) {
      const int64_t w = w0 + i * stride;
      q[i] = w < words ? codes[w] : 0u;
      sc[i] = w < words ? scales[w / 2] : 0u;
    }
#pragma unroll
    for (int i = 0; i < kWordsAThread; ++i) {
      const int64_t w = w0 + i * stride;
      if (w < words) {
        out[w] = internal::nvfp4::DecodeWord<false>(q[i], internal::nvfp4::ScaleHalf2(sc[i]));
      }
    }
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
  const int64_t words = m * k / 8;
  const int64_t blocks = std::min<int64_t>(
      (words + kThreads * kWordsAThread - 1) / (kThreads * kWordsAThread), int64_t{1} << 16);
  ExpandKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint32_t*>(codes), static_cast<const uint8_t*>(scales), words,
      static_cast<uint4*>(out));
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gemmd::gpu
