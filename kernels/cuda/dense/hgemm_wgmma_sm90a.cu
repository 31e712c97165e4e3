// Hopper warpgroup-MMA GEMM (PRECISION_FP16_TENSOR): FP16 (hgemm_wgmma_*) or BF16
// (bgemm_wgmma_*) operands, FP32 accumulation, FP32 output (sm_90a only).
//
// Why: the WMMA kernels (hgemm_wmma.cu) compile to mma.sync, whose operands pass through
// ldmatrix and the register file and whose MMAs issue synchronously; on the H200 they stop
// at 46% of cuBLAS (docs/KERNELS.md). wgmma reads both operands from shared memory itself
// and runs asynchronously to the warps that issue it.
// How: the structure of the INT8 wgmma kernel (quant_square_int8_sm90a.cu). A 128x256
// block tile with two warpgroups (256 threads), each owning 64 rows x 256 columns
// (m64n256k16, 128 FP32 accumulators per thread); K steps of 64 elements (one 128-byte
// swizzled row per tile row); operands copied by all threads with cp.async (zero-filled
// past the edges) into a 4-stage ring in the layout the descriptors expect; one barrier
// per K step, the copies for step k+2 in flight while step k's four wgmmas run, a stage
// refilled only after the wgmma that read it retired (wait_group 1). Epilogue straight
// from the accumulators: alpha, beta * C_in, float2 stores.
// Operands must be K-major (A [M,K], B [N,K] row-major): the tiled host code transposes
// the others into the workspace first (TileVariant::k_major, pack.cu).
// What it buys: 62% of cuBLAS FP16 at 4096^3 on the H200 against WMMA's 45% in the same
// run (docs/KERNELS.md). Next steps (not here): TMA loads, producer/consumer warp
// specialisation, a persistent tile scheduler.
// Built only for sm_90a (kernels/cuda/CMakeLists.txt); registered to run on 9.0 alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_util.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/wgmma_sm90a.cuh"
#include "kernels/cuda/dense/block_tile.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"
#include "kernels/cuda/dense/wgmma_epilogue.cuh"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 256;
constexpr int kRowBytes = kBK * 2;  // one 128-byte swizzle row per tile row
constexpr int kStageA = kBM * kRowBytes, kStageB = kBN * kRowBytes;
constexpr int kStageBytes = kStageA + kStageB;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align to 1024
static_assert(kSmemBytes <= 227 * 1024, "one block per SM must fit");
static_assert(kRowBytes == 128, "the descriptors assume 128-byte swizzled rows");

template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 1) WgmmaGemmKernel(const TileArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const BlockTile tile = BlockTileOf<kBM, kBN, kBK>(args);
  const int M = args.m, N = args.n, m0 = tile.m0, n0 = tile.n0;
  const int tid = threadIdx.x, wg = tid / 128;
  const char* A = static_cast<const char*>(args.a) + tile.item * args.stride_a * 2;
  const char* B = static_cast<const char*>(args.b) + tile.item * args.stride_b * 2;
  const int64_t lda_bytes = args.lda * 2, ldb_bytes = args.ldb * 2;

  auto load_stage = [&](int slot, int k0) {
    unsigned char* sA = smem + slot * kStageBytes;
    unsigned char* sB = sA + kStageA;
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreads; ++i) {
      const int ci = tid + i * kThreads, r = ci / 8, c = ci % 8;
      // 8-element chunks: one past K reads the row's padding (zeros, or real columns of
      // an unpacked operand, whose K is a multiple of 8 and so never straddles).
      const bool ok = m0 + r < M && k0 + c * 8 < tile.k_end;
      CpAsync16(sA + SwizzledChunk(r, c),
                ok ? A + int64_t(m0 + r) * lda_bytes + int64_t(k0 + c * 8) * 2 : A,
                ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int ci = tid + i * kThreads, r = ci / 8, c = ci % 8;
      const bool ok = n0 + r < N && k0 + c * 8 < tile.k_end;
      CpAsync16(sB + SwizzledChunk(r, c),
                ok ? B + int64_t(n0 + r) * ldb_bytes + int64_t(k0 + c * 8) * 2 : B,
                ok ? 16 : 0);
    }
  };

  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

  const int num_k = tile.num_k;
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < num_k) load_stage(s, tile.k_begin + s * kBK);
    CpAsyncCommit();
  }
  for (int kt = 0; kt < num_k; ++kt) {
    CpAsyncWait<kStages - 3>();
    FenceProxyAsync();  // cp.async wrote through the generic proxy, wgmma reads the async one
    __syncthreads();    // step kt landed for everyone; step kt-2's wgmma retired everywhere
    const int next = kt + kStages - 2;
    if (next < num_k) load_stage(next % kStages, tile.k_begin + next * kBK);
    CpAsyncCommit();

    const uint32_t stage = base + (kt % kStages) * kStageBytes;
    const uint64_t desc_a = SmemDesc(stage + wg * 64 * kRowBytes);
    const uint64_t desc_b = SmemDesc(stage + kStageA);
    FenceAccumulators(acc);
    WgmmaFence();
#pragma unroll
    for (int s = 0; s < kBK / 16; ++s) {
      // +32 bytes along K inside the swizzled row: the hardware applies the XOR.
      WgmmaHalfM64N256K16<kBf16>(acc, desc_a + 2 * s, desc_b + 2 * s);
    }
    WgmmaCommit();
    WgmmaWait<1>();
    FenceAccumulators(acc);
  }
  WgmmaWait<0>();
  FenceAccumulators(acc);

  StoreWarpgroupTile(args, tile, wg * 64, tid % 128, acc);
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

template <bool kBf16>
absl::Status LaunchWgmma(const TileArgs& t, cudaStream_t stream) {
  if (t.k > 0 && (t.trans_a || !t.trans_b)) {  // k == 0: no operand is read
    return absl::InternalError("the wgmma tile reads K-major operands only (A [M,K], B [N,K])");
  }
  static std::atomic<uint64_t> configured{0};
  const auto kernel = &WgmmaGemmKernel<kBf16>;
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), kSmemBytes, &configured));
  const int64_t tiles = static_cast<int64_t>((t.m + kBM - 1) / kBM) * ((t.n + kBN - 1) / kBN);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(t.splits),
                  static_cast<unsigned>(t.batch));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(t);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

TileVariant Wgmma(const char* name, DataType operand_type, TileLaunchFn launch,
                  CostProfile profile) {
  TileVariant v;
  v.name = name;
  v.precision = Precision::kFp16Tensor;
  v.operand_type = operand_type;
  v.min_compute_capability = 90;
  v.sm90a_only = true;
  v.k_major = true;
  v.tile_m = kBM;
  v.tile_n = kBN;
  v.tile_k = kBK;
  v.split_k = false;
  v.profile = profile;
  v.launch = launch;
  return v;
}

}  // namespace

// Cost profile (TFLOP/s, blocks per SM): H200, gemm-bench 2026-12-03 (FP16 and BF16 run
// alike, 450-483 at 4096^3 and 8192^3).
void AppendWgmmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels) {
  constexpr CostProfile kProfile{470.0, 1};
  kernels->push_back(MakeTiledGemmKernel(Wgmma("hgemm_wgmma_128x256x64_s4", DataType::kFloat16,
                                               &LaunchWgmma<false>, kProfile)));
  kernels->push_back(MakeTiledGemmKernel(Wgmma("bgemm_wgmma_128x256x64_s4", DataType::kBFloat16,
                                               &LaunchWgmma<true>, kProfile)));
}

}  // namespace gemmd::gpu::internal
