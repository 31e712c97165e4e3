// Hopper GEMM, steps 2 and 3 of the wgmma ladder: TMA loads and warp specialisation, and
// B read as stored (hgemm_wgmma_tma_* FP16, bgemm_wgmma_tma_* BF16; FP32 accumulation and
// output; sm_90a). Two tiles: 128x256 (two consumer warpgroups) for large problems, and
// 64x256 (one) with split-K for skinny ones.
//
// Why: in step 1 (hgemm_wgmma_sm90a.cu) every thread issues cp.async for each K step and
// the whole block meets at a barrier before each step's wgmmas, so the tensor cores wait
// on address arithmetic, copy issue and the slowest warp; and a B stored [K, N] first
// needs a transposed copy.
// How: a producer warpgroup and one or two consumer warpgroups. The producer (one thread of warpgroup 0, its registers given
// back with setmaxnreg) asks the copy engine (TMA) for each K step's A and B boxes, 3-D
// tensor maps (inner, rows, batch item) with the 128-byte swizzle the wgmma descriptors
// read, zero-filled past every edge; a "full" mbarrier per stage counts the bytes in. The
// consumer warpgroups (64 x 256 each, m64n256k16, 128 FP32 accumulators) wait on
// it, issue their four wgmmas, and once a step's wgmmas have retired (wait_group 1 at
// the next step) release its stage on an "empty" mbarrier the producer waits on before
// refilling. No block-wide barrier in the main loop. A is K-major ([M, K]); B is either
// [N, K] or [K, N], the latter loaded as four 64 x 64 N-major boxes per stage and read
// by the wgmma transposed (imm-trans-b), with no copy. K steps of 64, 4 stages, and the
// epilogue of step 1; K slices (split-K) for the 64-row tile.
// What it buys (H200, gemm-bench, docs/KERNELS.md): TMA and specialisation took FP16
// 4096^3 from 62.7% to 74.5% of cuBLAS (the transposed copy of B still included);
// reading B as stored took it to 94.2% (8192^3: 97.5%); the 64-row split-K tile took
// 64 x 8192^2 from 51% (WMMA) to 77%.
// Built only for sm_90a; registered to run on 9.0 alone.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/tma_sm90a.cuh"
#include "kernels/cuda/common/wgmma_sm90a.cuh"
#include "kernels/cuda/dense/block_tile.cuh"
#include "kernels/cuda/dense/tiled_gemm.h"
#include "kernels/cuda/dense/wgmma_epilogue.cuh"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBN = 256, kBK = 64, kStages = 4;
constexpr int kRowBytes = kBK * 2;
constexpr int kStageB = kBN * kRowBytes;
constexpr int kBarrierBytes = 2 * kStages * 8;
constexpr int kMnBlockBytes = kBK * 128;  // an N-major B box: 64 K rows of 64 N (128 bytes)
static_assert(kRowBytes == 128, "one 128-byte swizzle row per tile row");

// The tile of kConsumers consumer warpgroups (64 rows each) and one producer.
template <int kConsumers>
struct TmaTile {
  static constexpr int kBM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kStageA = kBM * kRowBytes;
  static constexpr int kStageBytes = kStageA + kStageB;
  static constexpr int kSmemBytes = kStages * kStageBytes + kBarrierBytes + 1024;  // + align
  static_assert(kSmemBytes <= 227 * 1024, "one block per SM must fit");
};

// kBMn: B is stored [K, N] (N-major) and read so, as 4 boxes of 64 N x 64 K per stage
// (each 64 rows of 128 bytes, one per K index), the wgmma reading it transposed;
// otherwise B is [N, K] like A.
template <bool kBf16, bool kBMn, int kConsumers>
__global__ void __launch_bounds__(TmaTile<kConsumers>::kThreads, 1)
    WgmmaTmaGemmKernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b, const TileArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Tile = TmaTile<kConsumers>;
  constexpr int kBM = Tile::kBM, kStageA = Tile::kStageA, kStageBytes = Tile::kStageBytes;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle atoms are 1024-aligned
  const uint32_t full = base + kStages * kStageBytes, empty = full + kStages * 8;
  const BlockTile tile = BlockTileOf<kBM, kBN, kBK>(args);
  const int wg = threadIdx.x / 128, num_k = tile.num_k;
  if (threadIdx.x == 0) InitRingBarriers<kStages>(full, empty, kConsumers);
  __syncthreads();

  if (wg == 0) {
    SetMaxRegistersDown<40>();
    if (threadIdx.x == 0) {
      const int item_a = args.stride_a == 0 ? 0 : tile.item;
      const int item_b = args.stride_b == 0 ? 0 : tile.item;
      for (int kt = 0; kt < num_k; ++kt) {
        const int s = kt % kStages;
        // The stage's previous round (step kt - kStages) must have been released.
        if (kt >= kStages) MbarWait(empty + s * 8, ((kt / kStages) + 1) & 1);
        const uint32_t stage = base + s * kStageBytes;
        MbarArriveExpectTx(full + s * 8, kStageBytes);
        const int k0 = tile.k_begin + kt * kBK;
        TmaLoad3d(stage, &map_a, k0, tile.m0, item_a, full + s * 8);
        if constexpr (kBMn) {
#pragma unroll
          for (int j = 0; j < kBN / 64; ++j) {
            TmaLoad3d(stage + kStageA + j * kMnBlockBytes, &map_b, tile.n0 + 64 * j, k0, item_b,
                      full + s * 8);
          }
        } else {
          TmaLoad3d(stage + kStageA, &map_b, k0, tile.n0, item_b, full + s * 8);
        }
      }
    }
    return;
  }

  SetMaxRegistersUp<232>();
  const int consumer = wg - 1, thread = threadIdx.x % 128;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  for (int kt = 0; kt < num_k; ++kt) {
    const int s = kt % kStages;
    MbarWait(full + s * 8, (kt / kStages) & 1);
    const uint32_t stage = base + s * kStageBytes;
    const uint64_t desc_a = SmemDesc(stage + consumer * 64 * kRowBytes);
    // N-major B: 64-wide N blocks kMnBlockBytes apart, groups of 8 K 1024 bytes apart.
    const uint64_t desc_b = kBMn ? SmemDescMn(stage + kStageA, kMnBlockBytes, 1024)
                                 : SmemDesc(stage + kStageA);
    FenceAccumulators(acc);
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k) {
      // K-major: +32 bytes along K inside the swizzled row (the hardware applies the
      // XOR); N-major: +2048 bytes, two groups of 8 K rows.
      WgmmaHalfM64N256K16<kBf16, kBMn>(acc, desc_a + 2 * k, desc_b + (kBMn ? 128 : 2) * k);
    }
    WgmmaCommit();
    WgmmaWait<1>();  // step kt - 1's wgmmas have retired: its stage can be refilled
    FenceAccumulators(acc);
    if (kt > 0 && thread == 0) MbarArrive(empty + ((kt - 1) % kStages) * 8);
  }
  WgmmaWait<0>();
  FenceAccumulators(acc);
  StoreWarpgroupTile(args, tile, consumer * 64, thread, acc);
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

// A 16-bit operand's tensor map: boxes of 64 inner elements (128 bytes) x box_outer rows.
absl::Status MakeMap(CUtensorMap* map, bool bf16, const void* base, int64_t inner,
                     int64_t outer, int64_t ld, int64_t stride, int items, int box_outer) {
  return MakeTensorMap3d(
      map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base,
      inner, outer, ld, stride, items, 64, box_outer);
}

template <bool kBf16, bool kBMn, int kConsumers>
absl::Status LaunchWgmmaTmaLayout(const TileArgs& t, cudaStream_t stream) {
  using Tile = TmaTile<kConsumers>;
  CUtensorMap map_a{}, map_b{};
  if (t.k > 0) {
    GEMMD_GPU_RETURN_IF_ERROR(
        MakeMap(&map_a, kBf16, t.a, t.k, t.m, t.lda, t.stride_a, t.batch, Tile::kBM));
    GEMMD_GPU_RETURN_IF_ERROR(
        kBMn ? MakeMap(&map_b, kBf16, t.b, t.n, t.k, t.ldb, t.stride_b, t.batch, kBK)
             : MakeMap(&map_b, kBf16, t.b, t.k, t.n, t.ldb, t.stride_b, t.batch, kBN));
  }
  static std::atomic<uint64_t> configured{0};
  const auto kernel = &WgmmaTmaGemmKernel<kBf16, kBMn, kConsumers>;
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), Tile::kSmemBytes, &configured));
  const int64_t tiles =
      static_cast<int64_t>((t.m + Tile::kBM - 1) / Tile::kBM) * ((t.n + kBN - 1) / kBN);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(t.splits),
                  static_cast<unsigned>(t.batch));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(map_a, map_b, t);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// K slices (split-K, grid.y) need no care: a slice's K range is whole 64-element steps
// but the last, whose end is K itself, where the tensor map reads zeros.
template <bool kBf16, int kConsumers>
absl::Status LaunchWgmmaTma(const TileArgs& t, cudaStream_t stream) {
  if (t.k > 0 && t.trans_a) {  // k == 0: no operand is read
    return absl::InternalError("the wgmma tile reads A K-major only (A [M,K])");
  }
  return t.trans_b ? LaunchWgmmaTmaLayout<kBf16, false, kConsumers>(t, stream)
                   : LaunchWgmmaTmaLayout<kBf16, true, kConsumers>(t, stream);
}

template <int kConsumers>
TileVariant WgmmaTma(const char* name, DataType operand_type, TileLaunchFn launch,
                     CostProfile profile, bool split_k) {
  TileVariant v;
  v.name = name;
  v.precision = Precision::kFp16Tensor;
  v.operand_type = operand_type;
  v.min_compute_capability = 90;
  v.sm90a_only = true;
  v.k_major = true;
  v.b_either_major = true;
  v.tile_m = TmaTile<kConsumers>::kBM;
  v.tile_n = kBN;
  v.tile_k = kBK;
  v.split_k = split_k;
  // One block per SM: about one wave of slices on 132 SMs.
  v.split_k_target_blocks = 128;
  v.profile = profile;
  v.launch = launch;
  return v;
}

}  // namespace

// Cost profiles (TFLOP/s, blocks per SM): H200, gemm-bench 2026-12-03. The 128-row tile:
// 669-752 at 4096^3 and 8192^3, FP16 and BF16. The 64-row split-K tile is there for
// skinny problems (M <= 64: 1, 16, 64 x 8192^2 at 87%, 90%, 77% of cuBLAS); its rate is
// set below the large tile's so that it is not chosen for square ones.
void AppendWgmmaTmaKernels(std::vector<std::unique_ptr<GpuGemmKernel>>* kernels) {
  constexpr CostProfile kLarge{700.0, 1}, kSkinny{450.0, 1};
  kernels->push_back(MakeTiledGemmKernel(
      WgmmaTma<2>("hgemm_wgmma_tma_128x256x64_s4", DataType::kFloat16,
                  &LaunchWgmmaTma<false, 2>, kLarge, false)));
  kernels->push_back(MakeTiledGemmKernel(
      WgmmaTma<2>("bgemm_wgmma_tma_128x256x64_s4", DataType::kBFloat16,
                  &LaunchWgmmaTma<true, 2>, kLarge, false)));
  kernels->push_back(MakeTiledGemmKernel(
      WgmmaTma<1>("hgemm_wgmma_tma_64x256x64_s4_splitk", DataType::kFloat16,
                  &LaunchWgmmaTma<false, 1>, kSkinny, true)));
  kernels->push_back(MakeTiledGemmKernel(
      WgmmaTma<1>("bgemm_wgmma_tma_64x256x64_s4_splitk", DataType::kBFloat16,
                  &LaunchWgmmaTma<true, 1>, kSkinny, true)));
}

}  // namespace gemmd::gpu::internal
