// NVFP4 operands expanded to FP16 in device memory, for kernels that read a dense FP16
// operand: each value as value * block scale * 2^-7 (exact in FP16, nvfp4_decode.cuh), the
// same halves the kernels' own decodes give; the reader puts 2^7 and the tensor scale
// back. Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_NVFP4_EXPAND_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_NVFP4_EXPAND_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace gemmd::gpu {

// Bytes ExpandNvfp4ToHalf writes for an [m, k] operand.
inline size_t Nvfp4HalfBytes(int64_t m, int64_t k) { return static_cast<size_t>(m * k * 2); }

// codes [m, k / 2] and E4M3 block scales [m, k / 16] (canonical NVFP4, both 16-byte
// aligned) -> out [m, k] FP16 (16-byte aligned), enqueued on `stream`. k % 32 == 0.
// INVALID_ARGUMENT for a shape or pointer it cannot take, INTERNAL for a CUDA error.
absl::Status ExpandNvfp4ToHalf(const void* codes, const void* scales, int64_t m, int64_t k,
                               void* out, cudaStream_t stream);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_NVFP4_EXPAND_H_
