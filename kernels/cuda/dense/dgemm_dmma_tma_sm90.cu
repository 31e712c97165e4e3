// FP64 GEMM on Hopper's FP64 tensor cores (mma.sync m16n8k8 f64) with its tiles brought in
// by the tensor memory accelerator (TMA) instead of per-thread cp.async: one thread asks
// the copy engine for a stage's boxes and an mbarrier counts their bytes, so the DMMA
// warps issue no copies and keep no copy addresses, and the copy engine fills zeros past
// every edge of M, N and K, so edge tiles and a partial last K tile take the same path.
//
// The tile is the sm_90 DMMA kernels' (dgemm_dmma_sm90.cu): 128 x 64 of C a block, 4 warps
// of 64 x 32, two blocks an SM, tiles in groups of 8 tile rows; here with four stages of
// K 16. Stage tiles are boxes of 128-byte rows (16 doubles) in the copy engine's 128-byte
// swizzle (the 16-byte chunk c of row r stored at chunk c ^ (r % 8)), which needs no
// padding, so four stages fit where the padded layout held three: an operand stored
// K-contiguous is one box of [rows][16 K]; one stored M- or N-contiguous is boxes of
// [16 K][16 M or N].
//
// A warp's fragment loads then meet no bank twice in either layout when the DMMA's eight K
// slots map to the step's K positions by kSlotK (0, 4, 1, 5, 2, 6, 3, 7): a permutation of K
// inside each step, the same for A and B, which the products' sum does not see.
//
// The barriers replace __syncthreads: a stage's "full" barrier completes when its bytes
// have landed, its "empty" one when all 128 threads have read it; thread 0, which also
// computes, refills a stage halfway through the next one, when the others are done with it.
// Unrolled by the stage count (kUnroll), every shared-memory and barrier address of a turn is
// a thread's base plus a constant, and the loop issues little besides its loads and DMMAs.
// Needs 16-byte aligned operands with even leading dimensions and item strides (the tensor
// maps' rule); other operands go to the cp.async kernel.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/tma_sm90a.cuh"
#include "kernels/cuda/dense/dgemm_dmma.h"
#include "kernels/cuda/dense/dmma_m16n8k8.cuh"
#include "kernels/cuda/dense/tile_order.h"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBN = 64, kStages = 4, kThreads = 128;
constexpr int kStageA = kDgemmTileM * 16 * 8, kStageB = kBN * 16 * 8;  // 16 KiB + 8 KiB
constexpr int kStageBytes = kStageA + kStageB;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + barriers, align
constexpr int kBM = kDgemmTileM, kBK = 16;
constexpr int kWM = 64, kWN = 32, kWarpsN = kBN / kWN;
constexpr int kTilesM = kWM / 16, kTilesN = kWN / 8;  // 4 x 4 m16n8k8 tiles a warp
constexpr int kUnits = (kBK / 8) * kTilesM;           // DMMA units a turn: (step, tile row)
constexpr int kGroupM = 8, kMaxGridZ = 65535;
// Thread 0 refills a stage after this many of the current turn's units.
constexpr int kRefillUnit = 4;
constexpr int kRowBytes = kBK * 8;         // a swizzled row: 16 doubles, 128 bytes
constexpr int kBoxBytes = 16 * kRowBytes;  // a [16][16] box of an M- or N-contiguous tile

// The K position inside a step of 8 that DMMA K slot `slot` reads.
__host__ __device__ constexpr int kSlotK(int slot) { return slot / 2 + 4 * (slot % 2); }

// f(std::integral_constant<int, i>) for i = 0 .. kCount - 1, unrolled.
template <int kCount, int kFirst = 0, class F>
__device__ __forceinline__ void StaticFor(F&& f) {
  if constexpr (kFirst < kCount) {
    f(std::integral_constant<int, kFirst>{});
    StaticFor<kCount, kFirst + 1>(f);
  }
}

// Byte offset of element (x, k) (x along M or N, k along the tile's 16 K) in a stage tile:
// kKMajor, rows of 16 K, one per x; else [16 K][16 x] boxes, one per 16 x.
template <bool kKMajor>
__device__ __forceinline__ int TileOffset(int x, int k) {
  if constexpr (kKMajor) {
    return x * kRowBytes + (((k / 2) ^ (x % 8)) * 16) + (k % 2) * 8;
  } else {
    return (x / 16) * kBoxBytes + k * kRowBytes + ((((x % 16) / 2) ^ (k % 8)) * 16) + (x % 2) * 8;
  }
}

// kTransA: A stored [K, M] (M-contiguous); kTransB: B stored [N, K] (K-contiguous).
template <bool kUnroll, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads, 2)
    DgemmDmmaTmaKernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b, DgemmArgs p, int item0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // its entry runs it on 9.0 only; older images compile it without the asm
#endif
  constexpr bool kAKMajor = !kTransA, kBKMajor = kTransB;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  const unsigned char* smem = smem_raw + (base - raw);
  const uint32_t full = base + kStages * kStageBytes, empty = full + kStages * 8;
  const int tid = static_cast<int>(threadIdx.x);
  const int item = item0 + static_cast<int>(blockIdx.z);
  const TileCoord tile = GroupedTile(
      static_cast<int>(blockIdx.y) * static_cast<int>(gridDim.x) + static_cast<int>(blockIdx.x),
      static_cast<int>(gridDim.y), static_cast<int>(gridDim.x), kGroupM);
  const int m0 = tile.m * kBM, n0 = tile.n * kBN;
  const int ktiles = (p.k + kBK - 1) / kBK;
  if (tid == 0) InitRingBarriers<kStages>(full, empty, kThreads);
  __syncthreads();

  // Turn `kt`'s boxes into its stage (thread 0 only).
  const int item_a = p.stride_a == 0 ? 0 : item, item_b = p.stride_b == 0 ? 0 : item;
  auto load = [&](int kt, int s) {
    const uint32_t stage = base + s * kStageBytes, bar = full + s * 8;
    const int k0 = kt * kBK;
    MbarArriveExpectTx(bar, kStageBytes);
    if constexpr (kAKMajor) {
      TmaLoad3d(stage, &map_a, k0, m0, item_a, bar);
    } else {
#pragma unroll
      for (int j = 0; j < kBM / 16; ++j)
        TmaLoad3d(stage + j * kBoxBytes, &map_a, m0 + 16 * j, k0, item_a, bar);
    }
    if constexpr (kBKMajor) {
      TmaLoad3d(stage + kStageA, &map_b, k0, n0, item_b, bar);
    } else {
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) {
        TmaLoad3d(stage + kStageA + j * kBoxBytes, &map_b, n0 + 16 * j, k0, item_b, bar);
      }
    }
  };
  if (tid == 0) {
    for (int kt = 0; kt < kStages - 1 && kt < ktiles; ++kt) load(kt, kt);
  }

  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / kWarpsN) * kWM, wn = (warp % kWarpsN) * kWN;
  const int g = lane >> 2, t = lane & 3;
  // Fragments (PTX ISA, m16n8k8 .f64): a_i = A[g + 8 (i % 2)][slot t + 4 (i / 2)],
  // b_i = B[slot t + 4 i][g]; slot s reads K position kSlotK(s) of the step. The byte
  // offsets of a thread's elements for step 0, tile 0, less what the unrolled loops add as
  // constants; [q][v]: q the slot pair (t or t + 4), v what varies by thread beyond that
  // (K-major: the step, whose K/2 flips a chunk bit; M/N-major: the fragment's second 8
  // rows or columns, which do).
  int a_off[2][2], b_off[2][2];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int k = kSlotK(t + 4 * q);
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      a_off[q][v] =
          kAKMajor ? TileOffset<true>(wm + g, k + 8 * v) : TileOffset<false>(wm + g + 8 * v, k);
      b_off[q][v] =
          kBKMajor ? TileOffset<true>(wn + g, k + 8 * v) : TileOffset<false>(wn + g + 8 * v, k);
    }
  }
  auto at = [&](const unsigned char* tile_base, int offset) {
    return *reinterpret_cast<const double*>(tile_base + offset);
  };
  // K-major tiles: step 1's elements are those of step 0 with K + 8, chunk ^ 4
  // (a_off[q][1]); M/N-major ones: 8 rows further down the box.
  auto read_b = [&](const unsigned char* bs, int step, double(&bf)[kTilesN][2]) {
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        bf[j][i] = kBKMajor ? at(bs, b_off[i][step] + j * 8 * kRowBytes)
                            : at(bs, b_off[i][j % 2] + (j / 2) * kBoxBytes + step * 8 * kRowBytes);
      }
    }
  };
  auto read_a = [&](const unsigned char* as, int step, int mi, double(&af)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q = i / 2, h = i % 2;
      af[i] = kAKMajor ? at(as, a_off[q][step] + (mi * 16 + 8 * h) * kRowBytes)
                       : at(as, a_off[q][h] + mi * kBoxBytes + step * 8 * kRowBytes);
    }
  };
  auto stage_at = [&](int st) { return smem + st * kStageBytes; };

  double acc[kTilesM][kTilesN][4];
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
    }
  }
  // Turn kt in stage st (a constant when unrolled), whose barrier phase is `phase`.
  auto turn = [&](int kt, auto st, uint32_t phase) {
    const int s = st, s_prev = (s + kStages - 1) % kStages;
    const uint32_t phase_prev = s == 0 ? phase ^ 1 : phase;
    const unsigned char* as = stage_at(s);
    const unsigned char* bs = as + kStageA;
    MbarWait(full + s * 8, phase);
    double a_cur[4], b_cur[kTilesN][2];
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int step = u / kTilesM, mi = u % kTilesM;
      if (tid == 0 && u == kRefillUnit && kt + kStages - 1 < ktiles) {
        // Turn kt + kStages - 1 goes into the stage turn kt - 1 used, once every thread
        // has read it.
        if (kt > 0) MbarWait(empty + s_prev * 8, phase_prev);
        load(kt + kStages - 1, s_prev);
      }
      if (mi == 0) read_b(bs, step, b_cur);
      read_a(as, step, mi, a_cur);
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) Dmma(acc[mi][j], a_cur, b_cur[j]);
    }
    MbarArrive(empty + s * 8);  // this thread is done reading stage s
  };
  if constexpr (kUnroll) {
    uint32_t phase = 0;
    for (int kt0 = 0; kt0 < ktiles; kt0 += kStages, phase ^= 1) {
      StaticFor<kStages>([&](auto st) {
        if (kt0 + st < ktiles) turn(kt0 + st, st, phase);
      });
    }
  } else {
    for (int kt = 0; kt < ktiles; ++kt) turn(kt, kt % kStages, (kt / kStages) & 1);
  }

  StoreDmmaTiles(p, item, m0 + wm, n0 + wn, g, t, acc);
}

// A tensor map of an operand stored [items][outer][inner] (row stride ld), boxes of 16
// inner elements (128 bytes: the swizzle) by box_outer.
absl::Status MakeMap(CUtensorMap* map, const double* base, int64_t inner, int64_t outer, int64_t ld,
                     int64_t stride, int items, int box_outer) {
  return MakeTensorMap3d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT64, 8, base, inner, outer, ld, stride,
                         items, kBK, box_outer);
}

template <bool kUnroll, bool kTransA, bool kTransB>
absl::Status LaunchLayout(const DgemmArgs& p, int batch, cudaStream_t stream) {
  CUtensorMap map_a{}, map_b{};
  if (p.k > 0) {
    absl::Status mapped = kTransA ? MakeMap(&map_a, p.a, p.m, p.k, p.lda, p.stride_a, batch, 16)
                                  : MakeMap(&map_a, p.a, p.k, p.m, p.lda, p.stride_a, batch, kBM);
    mapped.Update(kTransB ? MakeMap(&map_b, p.b, p.k, p.n, p.ldb, p.stride_b, batch, kBN)
                          : MakeMap(&map_b, p.b, p.n, p.k, p.ldb, p.stride_b, batch, 16));
    // What the driver will not map (a stride past its limits) the cp.async kernel takes.
    if (!mapped.ok()) return LaunchDgemmM16n8k8Grouped(p, batch, kTransA, kTransB, stream);
  }
  static std::atomic<uint64_t> smem_set{0};
  constexpr auto* kKernel = &DgemmDmmaTmaKernel<kUnroll, kTransA, kTransB>;
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kKernel), kSmemBytes, &smem_set));
  const dim3 tiles((p.n + kBN - 1) / kBN, (p.m + kBM - 1) / kBM);
  for (int item0 = 0; item0 < batch; item0 += kMaxGridZ) {
    const int items = std::min(kMaxGridZ, batch - item0);
    kKernel<<<dim3(tiles.x, tiles.y, items), kThreads, kSmemBytes, stream>>>(map_a, map_b, p,
                                                                             item0);
    RETURN_IF_CUDA_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

// The tensor maps' rule: 16-byte aligned bases, row and item strides.
template <bool kUnroll>
absl::Status LaunchTma(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                       cudaStream_t stream) {
  const bool mappable = Aligned16(p.a) && Aligned16(p.b) && p.lda % 2 == 0 && p.ldb % 2 == 0 &&
                        p.stride_a % 2 == 0 && p.stride_b % 2 == 0;
  if (!mappable) return LaunchDgemmM16n8k8Grouped(p, batch, trans_a, trans_b, stream);
  if (!trans_a && !trans_b) return LaunchLayout<kUnroll, false, false>(p, batch, stream);
  if (!trans_a && trans_b) return LaunchLayout<kUnroll, false, true>(p, batch, stream);
  if (trans_a && !trans_b) return LaunchLayout<kUnroll, true, false>(p, batch, stream);
  return LaunchLayout<kUnroll, true, true>(p, batch, stream);
}

}  // namespace

absl::Status LaunchDgemmM16n8k8Tma(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                                   cudaStream_t stream) {
  return LaunchTma<false>(p, batch, trans_a, trans_b, stream);
}
absl::Status LaunchDgemmM16n8k8TmaUnrolled(const DgemmArgs& p, int batch, bool trans_a,
                                           bool trans_b, cudaStream_t stream) {
  return LaunchTma<true>(p, batch, trans_a, trans_b, stream);
}

}  // namespace gemmd::gpu::internal
