// Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier), for the
// sm_90 and sm_90a kernels: a producer thread asks the copy engine for a tile and the
// barrier counts the bytes as they land; consumers wait on the barrier's phase. Compiled
// for an older architecture (a file built for several) they are empty: the kernels that
// call them run on 9.0 only.
#ifndef GEMMD_KERNELS_CUDA_COMMON_TMA_SM90A_CUH_
#define GEMMD_KERNELS_CUDA_COMMON_TMA_SM90A_CUH_

#include <cuda.h>

#include <cstdint>

namespace gemmd::gpu::internal {

// `bar` is a shared-memory address (cvta to shared) of an 8-byte barrier.
__device__ __forceinline__ void MbarInit(uint32_t bar, int arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}
// Barrier initialisation visible to the copy engine (the async proxy) and the block.
__device__ __forceinline__ void MbarInitFence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// A ring of kStages stages: per stage a "full" barrier (the producer's arrival and the
// copy engine's bytes) and an "empty" one (one arrival per consumer warpgroup), 8 bytes
// apart each. One thread makes them; the block syncs before using them.
template <int kStages>
__device__ __forceinline__ void InitRingBarriers(uint32_t full, uint32_t empty, int consumers) {
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    MbarInit(full + s * 8, 1);
    MbarInit(empty + s * 8, consumers);
  }
  MbarInitFence();
}

// One arrival that also announces `bytes` still to come from the copy engine.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// One arrival when `arrive` holds, as a predicated instruction rather than a branch (a
// branch near wgmma operands makes ptxas serialize the wgmmas).
__device__ __forceinline__ void MbarArriveIf(uint32_t bar, bool arrive) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::
          "r"(bar),
      "r"(static_cast<int>(arrive))
      : "memory");
#endif
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

// Copies the box at (c0, c1, c2) of a 3-D tensor map into shared memory at `dst`,
// completing `bytes` on `bar` (the caller announced them with MbarArriveExpectTx).
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                          int c2, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) of contiguous global
// memory to shared memory at `dst`, completing them on `bar` (announced as TmaLoad3d's).
__device__ __forceinline__ void BulkLoad(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// Stores the box at (c0, c1, c2) of a 3-D tensor map from shared memory at `src` (laid
// out as TmaLoad3d would have written it; parts of the box past the tensor's edges are not
// written), as one bulk group of this thread's (BulkCommit). The writes to `src` must be
// made visible to the async proxy first (fence.proxy.async, then a barrier).
__device__ __forceinline__ void TmaStore3d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                           int c2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::
          "l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}
__device__ __forceinline__ void BulkCommit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's bulk groups still read shared memory (their
// sources may then be overwritten; the global writes may still be under way).
template <int kPending>
__device__ __forceinline__ void BulkWaitRead() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Waits until this thread's bulk groups have all completed, global writes included.
__device__ __forceinline__ void BulkWaitAll() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}
// A barrier of `threads` threads (whole warps) on hardware barrier `id` (1..15; 0 is
// __syncthreads's).
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Register budgets of warp-specialised kernels (the kernel needs a register cap at entry:
// __launch_bounds__(threads, 1)).
template <int kRegisters>
__device__ __forceinline__ void SetMaxRegistersDown() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void SetMaxRegistersUp() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

}  // namespace gemmd::gpu::internal

#endif  // GEMMD_KERNELS_CUDA_COMMON_TMA_SM90A_CUH_
