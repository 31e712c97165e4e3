// Quantized GEMM for large (compute-bound) problems on the GPU (kernels/quant_formats.h):
// C[M,N] (FP32, row-major) = dequant(A)[M,K] * dequant(B)[N,K]^T, both operands K-major
// as on the wire. Host-only header; compiles with g++.
//
// - INT8 x INT8: int32 accumulation (exact), then C[i][j] = float(acc) * sa[i] * sb[j].
// - NVFP4 x NVFP4 and FP16 x NVFP4: the packed E2M1 codes and E4M3 scales are copied to
//   shared memory as they are (0.5625 bytes per value) and decoded there, once per
//   block, into FP16 tiles (exact: e2m1 * e4m3 fits FP16), FP16 MMAs with FP32
//   accumulation; the tensor scales are applied in the epilogue.
// Each comes in two kernels: Hopper's warpgroup MMA (wgmma: *_sm90a.cu, built when the
// architecture list has 90, run on compute capability 9.0 only) and mma.sync for the
// rest (sm_80+: quant_square_int8.cu, quant_square_nvfp4.cu).
//
// Operands are DeviceQuantizedWeight (quant_gemm.h) for both A ([M,K]: its `n` is M) and
// B ([N,K]). Every M, N >= 0 works (edge tiles are zero-filled); K must be a multiple of
// 16 for INT8 and of 32 for NVFP4 (16-byte row alignment of the packed codes). NVFP4
// scale bytes are not checked for the NaN codes 0x7F / 0xFF here: validate requests
// before (kernels/quant_formats.h rejects them).
//
// Launchers are thread-safe, enqueue on `stream` and return without waiting.
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SQUARE_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SQUARE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/quantized/quant_gemm.h"

namespace gemmd::gpu {

// Which kernel family runs: kAuto = wgmma where SquareWgmmaAvailable(), else mma.sync.
// The others force one (tests and gemm-bench compare them).
enum class SquareMmaPath { kAuto, kMmaSync, kWgmma };

// Whether this build has the sm_90a kernels, and whether they run on a device of
// `compute_capability` (9.0 alone) or on the current device.
bool SquareWgmmaBuilt();
bool SquareWgmmaRuns(int compute_capability);
bool SquareWgmmaAvailable();

// The kernel that `path` (resolved on the current device) runs, e.g.
// "qgemm_int8_wgmma_128x256x128_s4"; fp16_a: FP16 A against NVFP4 B.
const char* SquareKernelName(QuantFormat format, bool fp16_a, SquareMmaPath path);

// Whether the square kernels take A x B^T (both quantized, same format: INT8 x INT8 or
// NVFP4 x NVFP4). OK, or
// - INVALID_ARGUMENT: null pointers, negative or > 2^31-1 sizes, A.k != B.k, NVFP4 with
//   K % 16 != 0 (not the format), a non-finite NVFP4 tensor scale;
// - FAILED_PRECONDITION: what the format allows but the kernels do not take: mixed
//   formats, INT8 with K % 16 != 0 or data not 16-byte aligned, INT8 scales not 4-byte
//   aligned, NVFP4 with K % 32 != 0, codes not 16-byte or scales not 4-byte aligned.
absl::Status SupportsSquareQuantizedGemm(const DeviceQuantizedWeight& a,
                                         const DeviceQuantizedWeight& b);

// The same for dense FP16 A [m, k] (row-major, device) against NVFP4 B; A must be
// 16-byte aligned (FAILED_PRECONDITION), B as above.
absl::Status SupportsSquareFp16Nvfp4Gemm(const void* a, int64_t m, int64_t k,
                                         const DeviceQuantizedWeight& b);

// Enqueue C = dequant(A) * dequant(B)^T; c is [a.n, b.n] FP32 in device memory, fully
// written. Returns what SupportsSquareQuantizedGemm returns, FAILED_PRECONDITION for
// kWgmma where it is not available, or INTERNAL for CUDA errors.
absl::Status LaunchSquareQuantizedGemm(const DeviceQuantizedWeight& a,
                                       const DeviceQuantizedWeight& b, float* c,
                                       cudaStream_t stream,
                                       SquareMmaPath path = SquareMmaPath::kAuto);

// Enqueue C = A * dequant(B)^T for FP16 A [m, k]; statuses as SupportsSquareFp16Nvfp4Gemm
// and LaunchSquareQuantizedGemm.
absl::Status LaunchSquareFp16Nvfp4Gemm(const void* a, int64_t m, int64_t k,
                                       const DeviceQuantizedWeight& b, float* c,
                                       cudaStream_t stream,
                                       SquareMmaPath path = SquareMmaPath::kAuto);

namespace internal {
// The kernels behind the launchers above, for operands that passed the checks. a_fp16 ==
// nullptr: A is the NVFP4 operand `a`; else dense FP16 [m, k] and `a` is unused.
absl::Status LaunchInt8SquareMma(const DeviceQuantizedWeight& a, const DeviceQuantizedWeight& b,
                                 float* c, cudaStream_t stream);
absl::Status LaunchNvfp4SquareMma(const DeviceQuantizedWeight& a, const void* a_fp16, int64_t m,
                                  const DeviceQuantizedWeight& b, float* c, cudaStream_t stream);
// Defined only in builds with sm_90a (GEMMD_HAVE_SM90A).
absl::Status LaunchInt8SquareWgmma(const DeviceQuantizedWeight& a,
                                   const DeviceQuantizedWeight& b, float* c,
                                   cudaStream_t stream);
absl::Status LaunchNvfp4SquareWgmma(const DeviceQuantizedWeight& a, const void* a_fp16,
                                    int64_t m, const DeviceQuantizedWeight& b, float* c,
                                    cudaStream_t stream);
}  // namespace internal

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_SQUARE_H_
