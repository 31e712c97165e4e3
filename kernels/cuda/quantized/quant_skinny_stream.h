// The skinny weight-only kernel's streaming path (quant_skinny_stream.cu), used by
// LaunchSkinnyQuantizedGemm (quant_skinny.cu) for NVFP4 or INT8 B and FP16 A of 9 to 64
// rows: blocks of 128 weight rows stream B and A's rows of the same K range through a
// shared-memory ring, split K over a thread-block cluster (sm_90+) when there are too few
// blocks for the GPU. Host-only header; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SKINNY_STREAM_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SKINNY_STREAM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/quantized/quant_gemm.h"

namespace gemmd::gpu {

// Whether the streaming path takes these operands: NVFP4 B with K % 64 == 0 (scale rows
// copied 4 bytes at a time) or INT8 B with K % 16 == 0, 16-byte aligned codes, 4-byte
// aligned scales; FP16 A (a, m rows of K halves, 16-byte aligned) with 1 <= m <=
// kSkinnyQuantizedMaxM.
bool SkinnyStreamRuns(const void* a, int64_t m, const DeviceQuantizedWeight& b);

// Whether the streaming path runs [m, n, k] of B's format on the current device: OK, or
// FAILED_PRECONDITION when SkinnyStreamRuns is false (b's pointers may be kArenaAligned),
// the device's shared memory is too small, or `fill_required` and the grid would leave
// more than a quarter of the SMs idle. Cached per device after the first call.
absl::Status SkinnyStreamFits(int64_t m, const DeviceQuantizedWeight& b, bool fill_required);

// Enqueues C[m, n] = A * dequant(B)^T (A FP16 on the device; with a_row_scale, row i of
// A is multiplied by a_row_scale[i], FP32 on the device). k_splits_override > 0
// fixes the cluster's K split (gemm-bench sweeps: 3 runs as 2, more than 4 as 4, and 1
// where the device or the build has no clusters; not checked against what fits at once).
// FAILED_PRECONDITION, with nothing enqueued, when SkinnyStreamRuns is false, the
// device's shared memory is too small, or `fill_required` and the grid would leave more
// than a quarter of the SMs idle; INTERNAL for CUDA errors.
absl::Status LaunchSkinnyStream(const void* a, const float* a_row_scale, int64_t m,
                                const DeviceQuantizedWeight& b, float* c, int k_splits_override,
                                bool fill_required, cudaStream_t stream);

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SKINNY_STREAM_H_
