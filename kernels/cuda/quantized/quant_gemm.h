// Quantized GEMM on the GPU (kernels/quant_formats.h): weight-only for skinny problems, C[M,N] =
// A[M,K] * dequant(B)[N,K]^T with A dense (FLOAT16, FLOAT32 or BFLOAT16) and B INT8 or
// NVFP4, M up
// to 64: the case where bytes, not FLOPs, set the speed (a few rows of activations
// against a large weight). Host-only header; compiles with g++.
//
// How (quant_skinny.cu): B is streamed from HBM once (up to M = 8 through a cp.async
// ring in shared memory; FP16 A of 9-64 rows through a ring shared by 128
// rows, quant_skinny_stream.cu; otherwise with 16-byte loads into registers), decoded
// in registers straight into mma.sync m16n8k16 fragments (exact: e2m1 * e4m3 and int8
// all fit FP16's significand), FP32 accumulation; the per-row INT8 scale or the NVFP4
// tensor scale is applied once, in the epilogue. A goes to the tensor cores as FP16:
// FLOAT16 A as is; FLOAT32 and BFLOAT16 A scaled by a power of two per row (its largest
// magnitude into [2^14, 2^15), inside FP16's range) and split into a pair hi + lo of FP16
// (hi = fp16(a), lo = fp16(a - hi), two MMAs; the row's scale is undone in the
// epilogue), which keeps the result within ~1e-6 of the FP32 product whatever the
// activations' magnitude, so the kernel is checked against the FP64 product of the
// dequantized operands with the FP32 tolerance (1e-5).
#ifndef GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_GEMM_H_
#define GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"

namespace gemmd::gpu {

inline constexpr int64_t kSkinnyQuantizedMaxM = 64;

// A quantized weight B [n, k] in device memory, laid out exactly as on the wire.
using DeviceQuantizedWeight = ::gemmd::PackedWeight;

// Device workspace LaunchSkinnyQuantizedGemm needs: 0 for FLOAT16 A (read in place), the
// FP16 hi and lo planes and the row scales of FLOAT32 or BFLOAT16 A.
size_t SkinnyQuantizedWorkspaceBytes(DataType a_type, int64_t m, int64_t k);

// Which way the skinny kernel brings B in (SkinnyQuantizedTuning::path). Each is its own
// catalogue entry (quantized_kernels.h): skinny_<format>_{ring,regs,stream}_mma16816.
enum class SkinnyPath {
  kAuto,       // ChooseSkinnyPath's choice
  kStream,     // the streaming path (quant_skinny_stream.h): one-plane A (FP16, BF16)
  kRing,       // the shared-memory ring: FP16 A of at most 8 rows (SkinnyRingRuns)
  kRegisters,  // the register path: everything the skinny kernel takes
  kClassic,    // the ring where it runs, else the register path (gemm-bench sweeps)
};

// A stand-in device address for checks made before operands are placed (selection at
// admission): the server's arena starts every region at a 256-byte boundary, which
// passes every alignment check of the quantized kernels.
inline const void* const kArenaAligned = reinterpret_cast<const void*>(uintptr_t{256});

// What the skinny kernel takes whatever the path: INVALID_ARGUMENT for m outside [1,
// kSkinnyQuantizedMaxM], an a_type other than FLOAT16, FLOAT32 or BFLOAT16, or a weight
// outside [1, 2^30] rows and K (NVFP4 needs K % 16 == 0). Shape only: pointers unread.
absl::Status CheckSkinnyOperands(DataType a_type, int64_t m, const DeviceQuantizedWeight& b);

// Whether the ring runs: FP16 A (`a`, the rows the kernel reads) of at most 8 rows, codes
// and A 16-byte aligned with NVFP4 K % 64 (scales copied 4 bytes at a time, 4-byte
// aligned) or INT8 K % 16, and its shallowest ring within `smem_optin_bytes`. OK or
// FAILED_PRECONDITION saying why.
absl::Status SkinnyRingRuns(const void* a, DataType a_type, int64_t m,
                            const DeviceQuantizedWeight& b, int64_t smem_optin_bytes);

// The path kAuto takes on the current device: the streaming path for one-plane A (FP16,
// BF16) of more than 8 rows where it runs and keeps the GPU busy (SkinnyStreamFits),
// else the ring where it runs, else the register path. `a` as SkinnyRingRuns (for
// FP32/BF16 A: the FP16 plane the launcher writes, or kArenaAligned). INTERNAL for CUDA
// errors of the device queries.
absl::StatusOr<SkinnyPath> ChooseSkinnyPath(const void* a, DataType a_type, int64_t m,
                                            const DeviceQuantizedWeight& b);

// Overrides of the launcher's choices, for gemm-bench sweeps (0 = the launcher's choice):
// how many blocks share a row's K range (on the streaming path, the cluster's size: see
// LaunchSkinnyStream); for M <= 8 with FP16 A, how many stages deep the shared-memory
// ring is (2, 3 or 4); which path (kStream returns the streaming path's
// FAILED_PRECONDITION where it cannot run; kAuto then takes another).
struct SkinnyQuantizedTuning {
  int k_splits = 0;
  int stages = 0;
  SkinnyPath path = SkinnyPath::kAuto;
};

// Enqueues C[m, n] (FP32, row-major, device) = A[m, k] (a_type FLOAT16, FLOAT32 or
// BFLOAT16, row-major, device) * dequant(B)^T on `stream`. INVALID_ARGUMENT for m outside
// [1, 64], NVFP4 with K % 16 != 0, another a_type, null pointers or a small workspace
// (null is fine when none is needed); FAILED_PRECONDITION when a forced path
// (`tuning.path`: kStream, kRing) cannot run; INTERNAL for CUDA errors.
absl::Status LaunchSkinnyQuantizedGemm(const void* a, DataType a_type, int64_t m,
                                       const DeviceQuantizedWeight& b, float* c,
                                       void* workspace, size_t workspace_bytes,
                                       cudaStream_t stream,
                                       const SkinnyQuantizedTuning& tuning = {});

}  // namespace gemmd::gpu

#endif  // GEMMD_KERNELS_CUDA_QUANTIZED_QUANT_GEMM_H_
