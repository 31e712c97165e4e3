// Internal to gemm_kernels_cuda: what the FP64 variants share (dgemm_dmma.cu holds their
// registry entry, each launcher its kernel): the launch arguments and the launchers.
// Every variant tiles C 128 rows at a time (128 or 64 columns) and needs no workspace.
// Host-only; compiles with g++.
#ifndef GEMMD_KERNELS_CUDA_DENSE_DGEMM_DMMA_H_
#define GEMMD_KERNELS_CUDA_DENSE_DGEMM_DMMA_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemmd::gpu::internal {

inline constexpr int kDgemmTileM = 128;
inline constexpr int kDgemmTileN = 128;

// One launch's problem, as the kernels read it: row-major operands as stored (A [M,K] or
// [K,M] when transposed, B [K,N] or [N,K]), batch items `stride_*` elements apart.
struct DgemmArgs {
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row-major leading dimensions as stored
  int64_t stride_a = 0, stride_b = 0, stride_c_in = 0, stride_c = 0;
  const double* a = nullptr;
  const double* b = nullptr;
  const double* c_in = nullptr;  // read only when beta != 0
  double* c = nullptr;
  double alpha = 1.0, beta = 0.0;
};

// Enqueues C = alpha * op(A) op(B) + beta * C_in for `batch` items on `stream`; INTERNAL
// for CUDA errors. Operands 8-byte aligned (the caller checks).
using DgemmLaunchFn = absl::Status (*)(const DgemmArgs& args, int batch, bool trans_a,
                                       bool trans_b, cudaStream_t stream);
// mma.sync m8n8k4 (sm_80 and up): dgemm_dmma.cu.
absl::Status LaunchDgemmM8n8k4(const DgemmArgs& args, int batch, bool trans_a, bool trans_b,
                               cudaStream_t stream);
// The sm_90 kernels (dgemm_dmma_sm90.cu), all 128 x 64 tiles of 4 warps, two blocks an SM,
// three stages of K 16, mma.sync m16n8k8; the steps of docs/KERNELS.md's ladder:
// every copy bounds-checked, tiles row by row (step 3);
absl::Status LaunchDgemmM16n8k8Checked(const DgemmArgs& args, int batch, bool trans_a, bool trans_b,
                                       cudaStream_t stream);
// blocks inside the matrix copying without checks, tiles in groups of 8 tile rows (step 4,
// chosen on 9.0);
absl::Status LaunchDgemmM16n8k8Grouped(const DgemmArgs& args, int batch, bool trans_a, bool trans_b,
                                       cudaStream_t stream);
// and fragments read a unit ahead in two register sets, the stage handover before the
// stage's last DMMAs (step 5).
absl::Status LaunchDgemmM16n8k8Pipelined(const DgemmArgs& args, int batch, bool trans_a,
                                         bool trans_b, cudaStream_t stream);
// and the full tiles apart from the edge tiles, in a launch of their own with no checked
// copies (step 6); the same with copy addresses from a fixed per-thread pointer plus an
// offset the block shares.
absl::Status LaunchDgemmM16n8k8Split(const DgemmArgs& args, int batch, bool trans_a, bool trans_b,
                                     cudaStream_t stream);
absl::Status LaunchDgemmM16n8k8SplitUniform(const DgemmArgs& args, int batch, bool trans_a,
                                            bool trans_b, cudaStream_t stream);
// Step 7: with the full tiles apart, step 4 (no fragments read ahead); and with a stage's
// copies spread over the DMMA units of the stage before it, a partial last K tile taken
// first: without and with step 5's fragments read ahead.
absl::Status LaunchDgemmM16n8k8GroupedSplit(const DgemmArgs& args, int batch, bool trans_a,
                                            bool trans_b, cudaStream_t stream);
absl::Status LaunchDgemmM16n8k8GroupedInterleaved(const DgemmArgs& args, int batch, bool trans_a,
                                                  bool trans_b, cudaStream_t stream);
absl::Status LaunchDgemmM16n8k8Interleaved(const DgemmArgs& args, int batch, bool trans_a,
                                           bool trans_b, cudaStream_t stream);
// Step 4 with the full tiles apart and uniform copy offsets, on two stages of K 32 (half
// the barriers, the same shared memory).
absl::Status LaunchDgemmM16n8k8K32TwoStages(const DgemmArgs& args, int batch, bool trans_a,
                                            bool trans_b, cudaStream_t stream);
// Step 8 (dgemm_dmma_tma_sm90.cu): step 4's tile and order, four stages of K 16 brought in
// by the tensor memory accelerator into swizzled tiles, mbarriers instead of block
// barriers; operands the tensor maps cannot describe go to step 4.
absl::Status LaunchDgemmM16n8k8Tma(const DgemmArgs& args, int batch, bool trans_a, bool trans_b,
                                   cudaStream_t stream);
// Step 9: step 8 with its turn loop unrolled by the stage count, so that every shared and
// barrier address is a constant offset.
absl::Status LaunchDgemmM16n8k8TmaUnrolled(const DgemmArgs& args, int batch, bool trans_a,
                                           bool trans_b, cudaStream_t stream);

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_DENSE_DGEMM_DMMA_H_
