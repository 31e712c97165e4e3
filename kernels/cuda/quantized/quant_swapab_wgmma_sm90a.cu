// The swap-AB skinny kernel on Hopper's warpgroup MMA (quant_swapab_wgmma.h): C^T = W * A^T
// with the decoded weight as wgmma's A operand, from registers, and the activations as its
// B, read by the tensor cores from shared memory.
//
// Why: on mma.sync (quant_swapab.cu) every lane loads its tokens' activations into
// registers for each MMA, so past 16 tokens the kernel moves more activation bytes through
// L1 than weight bytes from HBM, and each warp keeps only one super-tile in flight.
// How: a block of two consumer warpgroups and one producer warp owns 128 or 256 weight
// rows (kSets sets of 64 rows a warpgroup) and a range of K. The producer fills a ring of
// stages, each of 1 or 4 K super-tiles (64 K each): the block's 16-row tiles' code bytes
// (512 a tile; INT8 1024 value bytes) and scale bytes (64 a tile), one bulk copy each
// where the block holds a whole band (the layout keeps a band's tiles of consecutive K
// tiles consecutive), and one TMA box of the kN tokens' activations of those K tiles
// (128-byte swizzle, zeros past k and m). Every copy has a fixed cost, so fewer, larger
// ones a stage go faster. A consumer warp loads its lane's 16 code bytes and 8 scale
// bytes of a tile from shared memory, decodes them into the four m16n8k16 A fragments of
// the super-tile (quant_swapab_device.cuh; wgmma's register A has that layout per warp)
// and issues four m64nNk16 wgmmas with N = 8-64 tokens; every 1024 of K the accumulators
// are added into FP32 sums (a single chain over all of K loses accuracy). Blocks that
// would not fill the GPU split K over a cluster of up to 8 and add their sums through
// distributed shared memory in rank order (no atomics: the same bits on every run).
// Built only for sm_90a.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_facts.h"
#include "kernels/cuda/common/split_k_cluster.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/tma_sm90a.cuh"
#include "kernels/cuda/common/wgmma_sm90a.cuh"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/cuda/quantized/quant_swapab_device.cuh"
#include "kernels/cuda/quantized/quant_swapab_wgmma.h"

namespace gemmd::gpu::internal {
namespace {

namespace cg = cooperative_groups;

// A block: kWgs consumer warpgroups (2 or 4) and one producer warp.
constexpr int Threads(int wgs) { return 128 * wgs + 32; }
constexpr int kMaxStages = 16;
constexpr int kMaxSplits = kMaxClusterSplit;
constexpr int kActRowBytes = swapab::kSuperTileK * 2;  // a token's 64 halves of a K tile
// The accumulators are added into FP32 sums every kPromoteK of K: a wgmma chain over all
// of a long K loses accuracy (its error grows with the chain), short chains do not.
constexpr int kPromoteK = 1024;

template <bool kInt8, int kN, int kSets, int kKt, int kWgs>
struct Shape {
  static constexpr int kRows = 64 * kWgs * kSets;
  static constexpr int kTiles = kRows / 16;
  static constexpr int kTileBytes = swapab::kTileBytes<kInt8>;
  static constexpr int kScaleBytes = kInt8 ? 0 : swapab::kScaleTileBytes;
  // A stage, kKt K tiles: their activations ([K tile][token][64 halves], one TMA box),
  // the tiles' codes (values) and the tiles' scales, each [K tile][row tile].
  static constexpr int kActBytes = kKt * kN * kActRowBytes;  // whole swizzle atoms
  static constexpr int kScalesAt = kActBytes + kKt * kTiles * kTileBytes;
  static constexpr int kStageBytes = (kScalesAt + kKt * kTiles * kScaleBytes + 1023) / 1024 * 1024;
  static constexpr int kPitch = kRows + 4;  // floats: a lane's 4 tokens on 4 bank groups
  static constexpr int kReduceBytes = kN * kPitch * 4;
  static constexpr int kPromoteStages = kPromoteK / (swapab::kSuperTileK * kKt);
  static_assert(kN * kActRowBytes % 1024 == 0, "each K tile's activations are whole atoms");
  static_assert(kTiles <= swapab::kBandTiles, "a block's tiles are one band or half of one");
  static_assert(kPromoteStages >= 1, "a promotion spans whole stages");
};

// Blocks an SM: two, except where two sets' accumulators of 64 tokens need the registers
// of one (else spilled, or the wgmmas serialized by ptxas), or a block has four
// warpgroups.
constexpr int BlocksPerSm(int n, int sets, int wgs) { return n * sets >= 128 || wgs == 4 ? 1 : 2; }

// Stage i of a block holds K tiles [kt0, kt0 + real) of the block's K range: the last
// stage may hold fewer than kKt.
template <int kKt>
__device__ __forceinline__ int RealKTiles(int i, int k_count) {
  return min(kKt, k_count - i * kKt);
}

template <bool kInt8, int kN, int kSets, int kKt, int kWgs>
__global__ void __launch_bounds__(Threads(kWgs), BlocksPerSm(kN, kSets, kWgs))
    SwapAbWgmmaKernel(const __grid_constant__ CUtensorMap map_a, const uint8_t* __restrict__ packed,
                      float out_scale, int m, int n, int k_tiles, int stages, int bands_of,
                      float* __restrict__ c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<kInt8, kN, kSets, kKt, kWgs>;
  constexpr int kThreads = Threads(kWgs);
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const uint32_t full = base + stages * S::kStageBytes, empty = full + kMaxStages * 8;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // This block's K tiles [k_begin, k_begin + k_count), split at whole stages, and its
  // stages.
  const int splits = static_cast<int>(gridDim.y), split = static_cast<int>(blockIdx.y);
  const int k_stages = (k_tiles + kKt - 1) / kKt;
  const int s_begin = static_cast<int>(static_cast<int64_t>(k_stages) * split / splits);
  const int count =
      static_cast<int>(static_cast<int64_t>(k_stages) * (split + 1) / splits) - s_begin;
  const int k_begin = s_begin * kKt;
  const int k_count = min(k_tiles - k_begin, count * kKt);
  // Its row tiles: kTiles (a band of 16 or half of one) from tile0, `tiles` of them real;
  // at one K tile they are consecutive super-tiles from band_at + kt * band_tiles, so for
  // a whole band the stage's K tiles are consecutive too.
  const int row_tiles = n / 16, tile0 = static_cast<int>(blockIdx.x) * S::kTiles;
  // (`bands_of` row tiles a band: the layout's kBandTiles, or fewer where the weight was
  // laid out in narrower bands, each band alone; a block is never wider than a band.)
  const int band = tile0 / bands_of;
  const int band_tiles = min(bands_of, row_tiles - band * bands_of);
  const int tiles = min(S::kTiles, row_tiles - tile0);
  const int64_t band_at = static_cast<int64_t>(band) * bands_of * k_tiles + tile0 % bands_of;
  if (threadIdx.x == 0) InitRingBarriers<kMaxStages>(full, empty, kWgs);
  __syncthreads();

  float sums_reg[kSets][kN / 2];
#pragma unroll
  for (int set = 0; set < kSets; ++set) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) sums_reg[set][i] = 0.0f;
  }
  if (warp == 4 * kWgs) {
    // The producer (lane 0): per stage the tiles' codes (values) and scales, one copy each
    // for a whole band (one per K tile for half of one), and one TMA box of the
    // activations of the stage's K tiles (zeros past k and m).
    const uint8_t* const scales = packed + static_cast<int64_t>(n) * k_tiles * 32;  // NVFP4
    const bool whole_band = tiles == band_tiles;
    for (int i = 0; i < count && lane == 0; ++i) {
      const int s = i % stages, round = i / stages;
      const int real = RealKTiles<kKt>(i, k_count), kt0 = k_begin + i * kKt;
      if (round > 0) MbarWait(empty + s * 8, (round + 1) & 1);
      MbarArriveExpectTx(full + s * 8,
                         S::kActBytes + real * tiles * (S::kTileBytes + S::kScaleBytes));
      const uint32_t stage = base + s * S::kStageBytes;
      for (int j = 0; j < (whole_band ? 1 : real); ++j) {
        const int64_t first = band_at + static_cast<int64_t>(kt0 + j) * band_tiles;
        const int n_tiles = whole_band ? real * tiles : tiles;
        BulkLoad(stage + S::kActBytes + j * tiles * S::kTileBytes, packed + first * S::kTileBytes,
                 n_tiles * S::kTileBytes, full + s * 8);
        if constexpr (!kInt8) {
          BulkLoad(stage + S::kScalesAt + j * tiles * S::kScaleBytes,
                   scales + first * S::kScaleBytes, n_tiles * S::kScaleBytes, full + s * 8);
        }
      }
      if constexpr (kKt == 1) {
        TmaLoad3d(stage, &map_a, kt0 * swapab::kSuperTileK, 0, 0, full + s * 8);
      } else {
        TmaLoad3d(stage, &map_a, 0, 0, kt0, full + s * 8);
      }
    }
  } else {
    const int wg = warp / 4, wl = warp % 4;
    float acc[kSets][kN / 2];
    const auto zero_accumulators = [&] {
#pragma unroll
      for (int set = 0; set < kSets; ++set) {
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) acc[set][i] = 0.0f;
      }
    };
    zero_accumulators();
    for (int i = 0; i < count; ++i) {
      const int s = i % stages, real = RealKTiles<kKt>(i, k_count);
      MbarWait(full + s * 8, (i / stages) & 1);
      const unsigned char* stage = base_ptr + s * S::kStageBytes;
      // kGroup K tiles at a time (of the stage's kKt): decoded, then their wgmmas issued
      // together and waited for once. As many as the registers hold beside the
      // accumulators (more, and ptxas serializes the wgmmas): all of a stage's for one set
      // of 8 tokens, two for up to 32 tokens, else one.
      constexpr int kGroup = std::min(kKt, kSets == 1 && kN <= 32 ? (kN == 8 ? kKt : 2) : 1);
      static_assert(kKt % kGroup == 0, "groups tile the stage");
#pragma unroll
      for (int j0 = 0; j0 < kKt; j0 += kGroup) {
        // This warp's tiles of the group's K tiles, decoded into A fragments; tiles past n
        // and K tiles past the stage's are zeroed by a mask (no branch near the registers
        // a wgmma reads: ptxas would serialize the wgmmas).
        uint32_t a[kGroup][kSets][4][4];
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
#pragma unroll
          for (int set = 0; set < kSets; ++set) {
            const int tile = (wg * kSets + set) * 4 + wl;
            const uint32_t keep = j0 + g < real && tile < tiles ? ~0u : 0u;
            const int at = (j0 + g) * tiles + tile;
            const swapab::LaneTile lt =
                swapab::LoadLaneTile<kInt8>(stage + S::kActBytes + at * S::kTileBytes,
                                            stage + S::kScalesAt + at * S::kScaleBytes, lane);
#pragma unroll
            for (int step = 0; step < 4; ++step) {
              swapab::DecodeStep<kInt8>(lt, step, a[g][set][step]);
#pragma unroll
              for (int r = 0; r < 4; ++r) a[g][set][step][r] &= keep;
            }
          }
        }
#pragma unroll
        for (int set = 0; set < kSets; ++set) FenceAccumulators(acc[set]);
        WgmmaFence();
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          const uint64_t desc_b =
              SmemDesc(base + s * S::kStageBytes + (j0 + g) * kN * kActRowBytes);
#pragma unroll
          for (int set = 0; set < kSets; ++set) {
#pragma unroll
            for (int step = 0; step < 4; ++step) {
              // K-major B: +32 bytes (16 halves) a step inside the swizzled rows.
              WgmmaRsF16<kN>(acc[set], a[g][set][step], desc_b + 2 * step);
            }
          }
        }
        WgmmaCommit();
        WgmmaWait<0>();
#pragma unroll
        for (int set = 0; set < kSets; ++set) FenceAccumulators(acc[set]);
      }
      // The stage's wgmmas have retired: it goes back to the producer.
      MbarArriveIf(empty + s * 8, threadIdx.x % 128 == 0);
      if ((i + 1) % S::kPromoteStages == 0 || i + 1 == count) {
#pragma unroll
        for (int set = 0; set < kSets; ++set) {
#pragma unroll
          for (int r = 0; r < kN / 2; ++r) sums_reg[set][r] += acc[set][r];
        }
        zero_accumulators();
      }
    }
  }

  // Every stage has been consumed: the ring becomes [kN tokens][kPitch rows] of sums.
  __syncthreads();
  float* const sums = reinterpret_cast<float*>(base_ptr);
  if (warp < 4 * kWgs) {
    const int wg = warp / 4, wl = warp % 4, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int set = 0; set < kSets; ++set) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        // Accumulator i: rows 16 wl + g (+8 for i % 4 >= 2), token 8 (i / 4) + 2t + i % 2.
        const int row = (wg * kSets + set) * 64 + 16 * wl + g + 8 * ((i % 4) / 2);
        const int token = 8 * (i / 4) + 2 * t + i % 2;
        sums[token * S::kPitch + row] = sums_reg[set][i];
      }
    }
  }
  // INT8: the FP32 row scales follow the n * k values.
  const float* row_scales = reinterpret_cast<const float*>(
      packed + static_cast<int64_t>(n) * k_tiles * swapab::kSuperTileK);
  const auto write = [&](int token, int row, float v) {
    const int out_row = tile0 * 16 + row;
    if (out_row >= n) return;
    if constexpr (kInt8) v *= row_scales[out_row];
    c[static_cast<int64_t>(token) * n + out_row] = v * out_scale;
  };
  if (splits == 1) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < m * S::kRows; idx += kThreads) {
      const int token = idx / S::kRows, row = idx % S::kRows;
      write(token, row, sums[token * S::kPitch + row]);
    }
    return;
  }
  // K split over the cluster: block q adds rows [q, q + 1) * kRows / splits of every
  // block's sums, in rank order.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rows_per = S::kRows / splits, rank = split;
  for (int idx = threadIdx.x; idx < m * rows_per; idx += kThreads) {
    const int token = idx / rows_per, row = rank * rows_per + idx % rows_per;
    float v = 0.0f;
    for (int q = 0; q < splits; ++q) v += cluster.map_shared_rank(sums, q)[token * S::kPitch + row];
    write(token, row, v);
  }
  cluster.sync();  // no block leaves while others read its shared memory
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

constexpr int kMaxCachedDevices = 64;

// How one instance covers a problem on the current device.
struct Plan {
  int stages = 0;
  size_t smem = 0;
  int64_t row_blocks = 0;
  int splits = 1;
};

// BlocksPerSm blocks an SM: each takes as many stages as its share of the SM's shared
// memory holds (and at least what its sums need). K is split over clusters only as far as
// all the blocks are resident at once, and only while every cluster fits.
template <bool kInt8, int kN, int kSets, int kKt, int kWgs>
absl::StatusOr<Plan> PlanFor(int64_t n, int64_t k, int splits_override) {
  using S = Shape<kInt8, kN, kSets, kKt, kWgs>;
  constexpr int kThreads = Threads(kWgs);
  const auto kernel = SwapAbWgmmaKernel<kInt8, kN, kSets, kKt, kWgs>;
  const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
  if (!facts.ok()) return facts.status();
  const int device = facts->device;
  constexpr int kFixed = 1024 + 2 * kMaxStages * 8;  // alignment slack, barriers
  Plan plan;
  // The SM keeps 1 KiB a block.
  const int share = (facts->smem_optin + 1024) / BlocksPerSm(kN, kSets, kWgs) - 1024;
  plan.stages = std::clamp((share - kFixed) / S::kStageBytes, 2, kMaxStages);
  while (plan.stages * S::kStageBytes < S::kReduceBytes) ++plan.stages;
  plan.smem = static_cast<size_t>(plan.stages * S::kStageBytes + kFixed);
  if (plan.smem > static_cast<size_t>(facts->smem_optin)) {
    return absl::InternalError(absl::StrCat("the swap-AB wgmma kernel needs ", plan.smem,
                                            " bytes of shared memory; the device allows ",
                                            facts->smem_optin));
  }
  static std::atomic<size_t> raised[kMaxCachedDevices] = {};
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (!cacheable || raised[device].load() < plan.smem) {
    RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(plan.smem)));
    if (cacheable) raised[device].store(plan.smem);
  }
  plan.row_blocks = (n + S::kRows - 1) / S::kRows;
  const int64_t k_stages = (k / swapab::kSuperTileK + kKt - 1) / kKt;
  if (splits_override > 0) {
    plan.splits = splits_override;
    return plan;
  }
  static std::atomic<int> resident[kMaxCachedDevices] = {};
  int per_sm = cacheable ? resident[device].load(std::memory_order_relaxed) : 0;
  if (per_sm == 0) {
    RETURN_IF_CUDA_ERROR(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, plan.smem));
    per_sm = std::max(per_sm, 1);
    if (cacheable) resident[device].store(per_sm);
  }
  const int64_t slots = int64_t{facts->sms} * per_sm;
  while (plan.splits < kMaxSplits && plan.row_blocks * plan.splits * 2 <= slots &&
         k_stages >= plan.splits * 2 * 2) {
    plan.splits *= 2;
  }
  static ClusterFitCache fitting = {};
  const absl::StatusOr<int64_t> fits =
      SplitThatFits(kernel, plan.row_blocks, plan.splits, kThreads, plan.smem, device, fitting);
  if (!fits.ok()) return fits.status();
  plan.splits = static_cast<int>(*fits);
  return plan;
}

// The run-time knobs below the templates: the K split (0: chosen) and the layout's band
// width in row tiles.
struct Knobs {
  int splits = 0;
  int bands_of = swapab::kBandTiles;
};

template <bool kInt8, int kN, int kSets, int kKt, int kWgs>
absl::Status Launch(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                    int64_t k, float* c, const Knobs& knobs, cudaStream_t stream) {
  const absl::StatusOr<Plan> plan = PlanFor<kInt8, kN, kSets, kKt, kWgs>(n, k, knobs.splits);
  if (!plan.ok()) return plan.status();
  // The activations: one K tile's box of [kN tokens][64 halves]; with several K tiles a
  // stage, A seen as [k / 64 K tiles][m][64] and a box of kKt K tiles.
  CUtensorMap map_a{};
  const int64_t k_tiles = k / swapab::kSuperTileK;
  GEMMD_GPU_RETURN_IF_ERROR(
      kKt == 1 ? MakeTensorMap3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a, k, m, k, 0, 1,
                                 swapab::kSuperTileK, kN)
               : MakeTensorMap3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a, swapab::kSuperTileK,
                                 m, k, swapab::kSuperTileK, static_cast<int>(k_tiles),
                                 swapab::kSuperTileK, kN, kKt));
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = SplitKClusterConfig(
      plan->row_blocks, plan->splits, Threads(kWgs), plan->smem, stream, &cluster);
  RETURN_IF_CUDA_ERROR(cudaLaunchKernelEx(
      &config, SwapAbWgmmaKernel<kInt8, kN, kSets, kKt, kWgs>, map_a,
      static_cast<const uint8_t*>(packed), out_scale, static_cast<int>(m), static_cast<int>(n),
      static_cast<int>(k_tiles), plan->stages, knobs.bands_of, c));
  return absl::OkStatus();
}

template <bool kInt8, int kSets, int kKt, int kWgs = 2>
absl::Status LaunchTokens(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                          int64_t k, float* c, const Knobs& knobs, cudaStream_t stream) {
  const auto go = [&](auto tokens) {
    return Launch<kInt8, decltype(tokens)::value, kSets, kKt, kWgs>(a, m, packed, out_scale, n, k,
                                                                    c, knobs, stream);
  };
  if (m <= 8) return go(std::integral_constant<int, 8>{});
  if (m <= 16) return go(std::integral_constant<int, 16>{});
  if (m <= 32) return go(std::integral_constant<int, 32>{});
  return go(std::integral_constant<int, 64>{});
}

template <bool kInt8>
absl::Status LaunchFormat(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                          int64_t k, float* c, int rows, int k_tiles_per_stage, int warpgroups,
                          const Knobs& knobs, cudaStream_t stream) {
  if (rows == 256) {
    // Four warpgroups of one set: a warp decodes one tile a K tile, as with 128 rows, and
    // the block still holds a whole band (one copy of codes and one of scales a stage).
    if (warpgroups == 4) {
      return LaunchTokens<kInt8, 1, 4, 4>(a, m, packed, out_scale, n, k, c, knobs, stream);
    }
    return k_tiles_per_stage == 4
               ? LaunchTokens<kInt8, 2, 4>(a, m, packed, out_scale, n, k, c, knobs, stream)
               : LaunchTokens<kInt8, 2, 1>(a, m, packed, out_scale, n, k, c, knobs, stream);
  }
  return k_tiles_per_stage == 4
             ? LaunchTokens<kInt8, 1, 4>(a, m, packed, out_scale, n, k, c, knobs, stream)
             : LaunchTokens<kInt8, 1, 1>(a, m, packed, out_scale, n, k, c, knobs, stream);
}

}  // namespace

absl::Status LaunchSwapAbWgmma(bool int8, const void* a, int64_t m, const void* packed,
                               float out_scale, int64_t n, int64_t k, float* c,
                               const SwapAbOptions& options, cudaStream_t stream) {
  int rows = options.rows, k_tiles_per_stage = options.k_tiles_per_stage;
  const int splits = options.splits, warpgroups = options.warpgroups;
  if (rows != 0 && rows != 128 && rows != 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("the swap-AB wgmma kernel takes 128 or 256 rows a block; got ", rows));
  }
  if (splits != 0 && splits != 1 && splits != 2 && splits != 4 && splits != kMaxSplits) {
    return absl::InvalidArgumentError(
        absl::StrCat("the swap-AB wgmma kernel splits K 1, 2, 4 or 8 ways; got ", splits));
  }
  if (k_tiles_per_stage != 0 && k_tiles_per_stage != 1 && k_tiles_per_stage != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the swap-AB wgmma kernel takes 1 or 4 K tiles a stage; got ", k_tiles_per_stage));
  }
  if (warpgroups != 0 && warpgroups != 2 && warpgroups != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the swap-AB wgmma kernel takes 2 or 4 consumer warpgroups; got ", warpgroups));
  }
  if (warpgroups == 4 && (rows == 128 || k_tiles_per_stage == 1)) {
    return absl::InvalidArgumentError(
        "the swap-AB wgmma kernel's 4 warpgroups take 256 rows a block and 4 K tiles a stage");
  }
  if (m < 1 || m > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("the swap-AB wgmma kernel takes 1 to 64 rows of A; got ", m));
  }
  // 128 rows a block where 256 would leave fewer blocks than about 3/4 of an H100's SMs
  // (8192 rows: 1.86x against 1.36x at M = 1), else 256 (28672 rows: 1.90x against 1.73x
  // at M = 64); H100 measurements, docs/BENCHMARKS.md.
  // Bands of 128 rows: blocks of 128.
  if (rows == 0) rows = warpgroups == 4 || (n >= 256 * 96 && options.band_rows != 128) ? 256 : 128;
  if (options.band_rows != 0 && options.band_rows != 256 &&
      !(options.band_rows == 128 && rows == 128 && n % 128 == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the swap-AB wgmma kernel reads bands of 256 rows, or of 128 with 128 rows "
                     "a block and rows % 128 == 0; got bands of ",
                     options.band_rows));
  }
  // Four K tiles a stage: a quarter of the copies (each copy has a fixed cost).
  if (k_tiles_per_stage == 0) k_tiles_per_stage = 4;
  Knobs knobs;
  knobs.splits = splits;
  if (options.band_rows != 0) knobs.bands_of = options.band_rows / 16;
  return int8 ? LaunchFormat<true>(a, m, packed, out_scale, n, k, c, rows, k_tiles_per_stage,
                                   warpgroups, knobs, stream)
              : LaunchFormat<false>(a, m, packed, out_scale, n, k, c, rows, k_tiles_per_stage,
                                    warpgroups, knobs, stream);
}

}  // namespace gemmd::gpu::internal
