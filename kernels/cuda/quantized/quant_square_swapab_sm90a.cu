// The swap-AB kernel for many tokens (quant_swapab_wgmma.h, LaunchSquareSwapAbWgmma): C^T =
// W * A^T on Hopper's warpgroup MMA, the decoded weight as wgmma's A operand from
// registers, 256 (or 128) tokens of activations as its B from shared memory.
//
// Why: the square kernels (quant_square_nvfp4_sm90a.cu) decode both operands into FP16
// tiles in shared memory, and those writes and the wgmmas' reads of them bound the kernel
// at about half the dense FP16 rate. Here the weight never passes through shared memory
// decoded: each lane decodes its 16 code bytes of a super-tile (kernels/quant_prepack.h)
// straight into its A fragments, a few operations for a 64 x 256 x 64 piece of work, and
// the activations arrive by TMA as the dense kernel's B does.
// How: the work comes in items of half a band of weight rows (one set of 64 rows a
// consumer warpgroup) x 256 tokens, or a band of 256 rows (two sets a warpgroup) x 128
// tokens (past 8192 of K: 64 tokens, the accumulators added into FP32 sums every 1024 of
// K). A block is one producer warpgroup and two consumer warpgroups; it takes one item, or
// stays (one an SM) and takes items in turn. One producer thread fills a ring of stages,
// each one K tile of 64: the item's codes (values) in one bulk copy, its scale bytes in
// another, and one TMA box of the tokens' activations (128-byte swizzle, zeros past k and
// m); NVFP4 A is expanded to FP16 before (nvfp4_expand.h). A consumer warp decodes its
// 16-row tile of a set into A fragments and issues four m64nNk16 wgmmas; with two sets it
// decodes both and waits once a K tile (or waits for each set's before decoding the
// other): the two consumer warpgroups overlap each other's decode. (Waiting with one set's
// wgmmas still in flight made ptxas serialize them all.) A stage goes back to the
// producer once the wgmmas that read it have retired. The epilogue stores C by TMA from
// shared memory, the consumers going on to their next item while it drains, or each
// accumulator straight from the registers.
// Built only for sm_90a.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_facts.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/tma_sm90a.cuh"
#include "kernels/cuda/common/wgmma_sm90a.cuh"
#include "kernels/cuda/quantized/quant_swapab.h"
#include "kernels/cuda/quantized/quant_swapab_device.cuh"
#include "kernels/cuda/quantized/quant_swapab_wgmma.h"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBandRows = swapab::kBandTiles * 16;  // 256: the layout's band
// Two consumer warpgroups. (Four would leave each thread 96 registers, 104 after
// setmaxnreg: ptxas then spills and serializes the wgmmas.)
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
// An item's weight rows: a whole band, or half of one with 256 tokens (one set of 64 rows
// a consumer warpgroup, m64n256k16).
constexpr int BlockRows(int tokens) { return tokens == 256 ? kBandRows / 2 : kBandRows; }
static_assert(kBandRows == 256, "the layout's bands are 256 rows");

constexpr int kLongK = 8192;        // past this, FP16 A's sums are promoted (kTokens = 64)
// The options' defaults, the fastest measured (docs/KERNELS.md, issue 35 steps 7 and 8).
constexpr int kSquareTokens = 256;  // an item's tokens
constexpr int kSquareWaits = 1;     // waits a K tile
// Persistent blocks with C stored by TMA where an SM takes at most this many items, a
// block an item with C from the registers past it: with few items an SM the epilogue is a
// larger share of each SM's time, and with many the persistent kernel measured slower.
constexpr int kPersistentItems = 8;

// The TMA-stored epilogue stages C in rounds of one set's 64 rows x kRound tokens: two
// boxes of 32 rows (128 bytes of FP32: the 128-byte swizzle's row) x kRound tokens.
// (Rounds of 16 or 32 tokens, a ring stage more, measured slower.)
constexpr int kBoxRows = 32;
constexpr int BoxBytes(int round) { return kBoxRows * round * 4; }
constexpr int RoundBytes(int round) { return 2 * BoxBytes(round); }
constexpr int kSquareRound = 64;

// A stage: the activations of one K tile ([kTokens][64 halves], 128-byte swizzle) and the
// item's codes (values) and scales. With kRound > 0 (TMA-stored C), each consumer
// warpgroup's C rounds come after the ring: two buffers, so one drains while the next is
// written, or one where two would leave fewer than 4 stages.
template <bool kInt8, int kTokens, int kRound>
struct Ring {
  static constexpr int kTiles = BlockRows(kTokens) / 16;               // the block's 16-row tiles
  static constexpr int kActBytes = kTokens * swapab::kSuperTileK * 2;  // a K tile's activations
  static constexpr int kTileBytes = swapab::kTileBytes<kInt8>;
  static constexpr int kScaleBytes = kInt8 ? 0 : swapab::kScaleTileBytes;
  static constexpr int kCodesAt = kActBytes;
  static constexpr int kScalesAt = kCodesAt + kTiles * kTileBytes;
  static constexpr int kStageBytes = (kScalesAt + kTiles * kScaleBytes + 1023) / 1024 * 1024;
  static constexpr int StagesWith(int buffers) {
    return (227 * 1024 - 1024 - 2 * 16 * 8 - kConsumers * buffers * RoundBytes(kRound)) /
           kStageBytes;
  }
  static constexpr int kBuffers = StagesWith(2) >= 4 ? 2 : 1;  // C rounds a consumer warpgroup
  static constexpr int kStages = StagesWith(kBuffers);
  static constexpr int kStagingAt = kStages * kStageBytes;  // 1024-aligned, as the swizzle needs
  static constexpr int kStagingBytes = kConsumers * kBuffers * RoundBytes(kRound);
  static constexpr int kBarriersAt = kStagingAt + kStagingBytes;
  static constexpr int kSmemBytes = kBarriersAt + 2 * kStages * 8 + 1024;  // + alignment
  static_assert(kStages >= 4 && kStages <= 16, "a ring of 4 to 16 stages");
  static_assert(kSmemBytes <= 227 * 1024, "one block an SM");
};

__device__ __forceinline__ void StoreShared(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

// A block's work item: the row tiles `tile0 ..` of one band (`tiles` of them; a band's
// tiles are consecutive at each K tile, and its K tiles consecutive, so the item reads
// `tiles` of them from `band_at` on, `band_tiles` apart) and the tokens from m0. Items run
// band-block fastest, so the blocks at work at once share their tokens.
struct SquareItem {
  int band, band_tiles, tile0, tiles, m0;
  int64_t band_at;
};
template <int kTokens>
__device__ __forceinline__ SquareItem ItemAt(int item, int n, int k_tiles) {
  constexpr int kTiles = BlockRows(kTokens) / 16;
  constexpr int kParts = swapab::kBandTiles / kTiles;  // blocks a band
  const int row_blocks = (n + BlockRows(kTokens) - 1) / BlockRows(kTokens);
  const int x = item % row_blocks;
  SquareItem it;
  it.band = x / kParts;
  it.band_tiles = min(swapab::kBandTiles, n / 16 - it.band * swapab::kBandTiles);
  it.tile0 = x % kParts * kTiles;
  it.tiles = min(kTiles, it.band_tiles - it.tile0);  // >= 1: the items cover n in blocks
  it.band_at = static_cast<int64_t>(it.band) * swapab::kBandTiles * k_tiles + it.tile0;
  it.m0 = item / row_blocks * kTokens;
  return it;
}

// A is FP16 through map_a. kOneWait: a consumer decodes both sets, then issues their
// wgmmas and waits once a K tile; else it waits for each set's before decoding the next.
// kTokens: 128; 256, on half a band (m64n256k16: each weight fragment decoded once for
// twice the products); or 64 with the accumulators added into FP32 sums every
// kPromoteTiles K tiles (for long K: one FP32 chain over 8192 of K already errs by 7e-6
// against FP64, and the error grows with it). Each consumer warpgroup owns two sets of 64
// rows (256 tokens: one). kRound > 0: C goes out through shared memory by TMA (map_c) in
// rounds of kRound tokens, so the consumers go on to their next item while it drains; 0:
// straight from the registers. A block takes items blockIdx.x, + gridDim.x, ... of
// `items`: one each, or as many as the grid is short of them (persistent blocks: the
// producer fills the next item's stages during the epilogue).
template <bool kInt8, bool kOneWait, int kTokens, int kRound>
__global__ void __launch_bounds__(kThreads, 1)
    SquareSwapAbKernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_c,
                       const uint8_t* __restrict__ packed, float out_scale, int m, int n,
                       int k_tiles, int items, float* __restrict__ c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using R = Ring<kInt8, kTokens, kRound>;
  constexpr int kStages = R::kStages, kActBytes = R::kActBytes;
  constexpr bool kPromote = kTokens == 64;
  constexpr int kPromoteTiles = 16;
  static_assert(kTokens == 64 || kTokens == 128 || kTokens == 256, "64, 128 or 256 tokens");
  constexpr int kSets = R::kTiles * 16 / 64 / kConsumers;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  unsigned char* const base_ptr = smem_raw + (base - raw);
  // Per stage: "full" (the copies' bytes) and "empty" (both consumer warpgroups done).
  const uint32_t full = base + R::kBarriersAt, empty = full + kStages * 8;
  const int wg = static_cast<int>(threadIdx.x) / 128;
  const int first = static_cast<int>(blockIdx.x), stride = static_cast<int>(gridDim.x);
  if (threadIdx.x == 0) InitRingBarriers<kStages>(full, empty, kConsumers);
  __syncthreads();

  if (wg == 0) {
    // Thread 0 fills stage j % kStages with the block's j-th K tile (its (j / k_tiles)-th
    // item's K tile j % k_tiles), once the consumers gave the stage back.
    const uint8_t* const scales = packed + static_cast<int64_t>(n) * k_tiles * 32;  // NVFP4's
    const auto fill = [&](int j) {
      const int item = first + j / k_tiles * stride, kt = j % k_tiles;
      if (item >= items) return;
      const SquareItem it = ItemAt<kTokens>(item, n, k_tiles);
      const int s = j % kStages;
      if (j >= kStages) MbarWait(empty + s * 8, ((j / kStages) + 1) & 1);
      const uint32_t stage = base + s * R::kStageBytes;
      MbarArriveExpectTx(full + s * 8, kActBytes + it.tiles * (R::kTileBytes + R::kScaleBytes));
      const int64_t at = it.band_at + static_cast<int64_t>(kt) * it.band_tiles;
      BulkLoad(stage + R::kCodesAt, packed + at * R::kTileBytes, it.tiles * R::kTileBytes,
               full + s * 8);
      if constexpr (!kInt8) {
        BulkLoad(stage + R::kScalesAt, scales + at * R::kScaleBytes, it.tiles * R::kScaleBytes,
                 full + s * 8);
      }
      TmaLoad3d(stage, &map_a, kt * swapab::kSuperTileK, it.m0, 0, full + s * 8);
    };
    const int mine = (items - first + stride - 1) / stride * k_tiles;  // the block's K tiles
    SetMaxRegistersDown<40>();
    for (int j = 0; j < mine && threadIdx.x == 0; ++j) fill(j);
    return;
  }

  // The registers the producer warpgroup gave back. setmaxnreg.inc waits until the block's
  // pool has them, and the pool is what the launch gave (384 threads x 168), so the
  // consumers take only what the producer released: 128 x (168 - 40) = 256 x (232 - 168).
  SetMaxRegistersUp<232>();
  const int consumer = wg - 1, warp = static_cast<int>(threadIdx.x) / 32 % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const float* row_scales = reinterpret_cast<const float*>(
      packed + static_cast<int64_t>(n) * k_tiles * swapab::kSuperTileK);  // INT8's
  const int g = lane / 4, t = lane % 4;
  float acc[kSets][kTokens / 2], sums[kSets][kPromote ? kTokens / 2 : 1];
  uint32_t a[kSets][4][4];
  int j = 0;      // the block's K tiles so far
  int round = 0;  // the warpgroup's C rounds so far (kRound > 0)
  for (int item = first; item < items; item += stride) {
    const SquareItem it = ItemAt<kTokens>(item, n, k_tiles);
#pragma unroll
    for (int set = 0; set < kSets; ++set) {
#pragma unroll
      for (int i = 0; i < kTokens / 2; ++i) {
        acc[set][i] = 0.0f;
        if constexpr (kPromote) sums[set][i] = 0.0f;
      }
    }
    for (int kt = 0; kt < k_tiles; ++kt, ++j) {
      const int s = j % kStages;
      MbarWait(full + s * 8, (j / kStages) & 1);
      const unsigned char* stage = base_ptr + s * R::kStageBytes;
      const uint64_t desc_b = SmemDesc(base + s * R::kStageBytes);
      // Tiles past n decode from a mask (no branch near the registers a wgmma reads).
      const auto decode = [&](int set) {
        const int tile = (consumer * kSets + set) * 4 + warp;
        const uint32_t keep = tile < it.tiles ? ~0u : 0u;
        const swapab::LaneTile lt =
            swapab::LoadLaneTile<kInt8>(stage + R::kCodesAt + tile * R::kTileBytes,
                                        stage + R::kScalesAt + tile * R::kScaleBytes, lane);
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          swapab::DecodeStep<kInt8>(lt, step, a[set][step]);
#pragma unroll
          for (int r = 0; r < 4; ++r) a[set][step][r] &= keep;
        }
      };
      const auto issue = [&](int set) {
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          // K-major B: +32 bytes (16 halves) a step inside the swizzled rows.
          WgmmaRsF16<kTokens>(acc[set], a[set][step], desc_b + 2 * step);
        }
      };
      if constexpr (kOneWait) {
#pragma unroll
        for (int set = 0; set < kSets; ++set) decode(set);
#pragma unroll
        for (int set = 0; set < kSets; ++set) FenceAccumulators(acc[set]);
        WgmmaFence();
#pragma unroll
        for (int set = 0; set < kSets; ++set) issue(set);
        WgmmaCommit();
        WgmmaWait<0>();
#pragma unroll
        for (int set = 0; set < kSets; ++set) FenceAccumulators(acc[set]);
      } else {
#pragma unroll
        for (int set = 0; set < kSets; ++set) {
          decode(set);
          FenceAccumulators(acc[set]);
          WgmmaFence();
          issue(set);
          WgmmaCommit();
          WgmmaWait<0>();
          FenceAccumulators(acc[set]);
        }
      }
      // Both sets' wgmmas have retired: the stage goes back to the producer.
      MbarArriveIf(empty + s * 8, threadIdx.x % 128 == 0);
      if (kPromote && ((kt + 1) % kPromoteTiles == 0 || kt + 1 == k_tiles)) {
#pragma unroll
        for (int set = 0; set < kSets; ++set) {
#pragma unroll
          for (int i = 0; i < kTokens / 2; ++i) {
            if constexpr (kPromote) sums[set][i] += acc[set][i];
            acc[set][i] = 0.0f;
          }
        }
      }
    }

    // Accumulator i of a set: row 16 warp + g (+8 for i % 4 >= 2), token 8 (i / 4) + 2t +
    // i % 2.
    const auto value = [&](int set, int i) {
      if constexpr (kPromote) {
        return sums[set][i];
      } else {
        return acc[set][i];
      }
    };
    const int rows0 = it.band * kBandRows + it.tile0 * 16 + consumer * kSets * 64;
    if constexpr (kRound > 0) {
      // Rounds of one set's 64 rows x kRound tokens: warp w's rows in box w / 2 at 16 (w % 2),
      // token-major, 128-byte swizzled (the 8 lanes of a token pair's row group then fall in
      // 8 different 16-byte chunks: no bank conflicts); the warpgroup's first thread stores
      // the two boxes once all 128 threads have written and fenced them.
      const bool lead = threadIdx.x % 128 == 0;
      const uint32_t staging = base + R::kStagingAt + consumer * R::kBuffers * RoundBytes(kRound);
#pragma unroll
      for (int set = 0; set < kSets; ++set) {
        float scale[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = rows0 + set * 64 + 16 * warp + g + 8 * h;
          scale[h] = kInt8 ? (row < n ? out_scale * row_scales[row] : 0.0f) : out_scale;
        }
#pragma unroll
        for (int q = 0; q < kTokens / kRound; ++q, ++round) {
          const uint32_t buffer = staging + (round % R::kBuffers) * RoundBytes(kRound);
          if (lead) BulkWaitRead<R::kBuffers - 1>();  // the buffer's last store has read it
          NamedBarrierSync(1 + consumer, 128);
          const uint32_t box = buffer + (warp / 2) * BoxBytes(kRound);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * (warp % 2) + g + 8 * h;  // the row in its box
#pragma unroll
            for (int jj = 0; jj < kRound / 8; ++jj) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int token = 8 * jj + 2 * t + e;
                const float v = value(set, 4 * (kRound / 8 * q + jj) + 2 * h + e) * scale[h];
                StoreShared(box + SwizzledChunk(token, r / 4) + (r % 4) * 4, v);
              }
            }
          }
          FenceProxyAsync();  // the TMA store reads the round through the async proxy
          NamedBarrierSync(1 + consumer, 128);
          if (lead) {
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              TmaStore3d(&map_c, buffer + b * BoxBytes(kRound), rows0 + set * 64 + b * kBoxRows,
                         it.m0 + q * kRound, 0);
            }
            BulkCommit();
          }
        }
      }
    } else {
#pragma unroll
      for (int set = 0; set < kSets; ++set) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = rows0 + set * 64 + 16 * warp + g + 8 * h;
          if (row >= n) continue;
          const float scale = kInt8 ? out_scale * row_scales[row] : out_scale;
#pragma unroll
          for (int jj = 0; jj < kTokens / 8; ++jj) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int token = it.m0 + 8 * jj + 2 * t + e;
              if (token < m)
                c[static_cast<int64_t>(token) * n + row] = value(set, 4 * jj + 2 * h + e) * scale;
            }
          }
        }
      }
    }
  }
  // The stores' reads of shared memory end before the block does.
  if (kRound > 0 && threadIdx.x % 128 == 0) BulkWaitAll();
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

// How the grid and the epilogue run.
struct Schedule {
  bool persistent;  // a block an SM taking items in turn, else a block an item
  int blocks;       // persistent: at most this many (0: no limit but the SMs)
  bool store_tma;   // C through shared memory by TMA, else from the registers
};

template <bool kInt8, bool kOneWait, int kTokens, int kRound>
absl::Status Launch(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                    int64_t k, float* c, Schedule schedule, cudaStream_t stream) {
  using R = Ring<kInt8, kTokens, kRound>;
  const auto kernel = &SquareSwapAbKernel<kInt8, kOneWait, kTokens, kRound>;
  static std::atomic<uint64_t> configured{0};
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), R::kSmemBytes, &configured));
  // A [m, k] FP16 in boxes of one K tile x kTokens, swizzled as wgmma reads it.
  CUtensorMap map_a{};
  GEMMD_GPU_RETURN_IF_ERROR(MakeTensorMap3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a, k, m, k,
                                            0, 1, swapab::kSuperTileK, kTokens));
  // C [m, n] FP32 in boxes of 32 rows x kRound tokens (the TMA-stored epilogue's).
  CUtensorMap map_c{};
  if constexpr (kRound > 0) {
    GEMMD_GPU_RETURN_IF_ERROR(MakeTensorMap3d(&map_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, c, n, m,
                                              n, 0, 1, kBoxRows, kRound));
  }
  constexpr int kBlockRows = BlockRows(kTokens);
  const int64_t items = (n + kBlockRows - 1) / kBlockRows * ((m + kTokens - 1) / kTokens);
  int64_t blocks = items;
  if (schedule.persistent) {
    const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
    if (!facts.ok()) return facts.status();
    blocks = std::min<int64_t>(items, facts->sms);  // one block an SM (the ring's shared memory)
    if (schedule.blocks > 0) blocks = std::min<int64_t>(blocks, schedule.blocks);
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, R::kSmemBytes, stream>>>(
      map_a, map_c, static_cast<const uint8_t*>(packed), out_scale, static_cast<int>(m),
      static_cast<int>(n), static_cast<int>(k / swapab::kSuperTileK), static_cast<int>(items), c);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <bool kInt8, bool kOneWait, int kTokens>
absl::Status LaunchStore(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                         int64_t k, float* c, Schedule schedule, cudaStream_t stream) {
  if constexpr (kOneWait) {
    if (schedule.store_tma) {
      return Launch<kInt8, true, kTokens, kSquareRound>(a, m, packed, out_scale, n, k, c, schedule,
                                                        stream);
    }
  }
  return Launch<kInt8, kOneWait, kTokens, 0>(a, m, packed, out_scale, n, k, c, schedule, stream);
}

// The tokens a block: 128, or 256 (`tokens`), except 64 past kLongK, with its sums
// promoted.
template <bool kInt8, bool kOneWait>
absl::Status LaunchTokens(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                          int64_t k, float* c, int tokens, Schedule schedule, cudaStream_t stream) {
  if (k > kLongK) {
    return LaunchStore<kInt8, kOneWait, 64>(a, m, packed, out_scale, n, k, c, schedule, stream);
  }
  if (tokens == 256) {  // one set a consumer: one wait
    return LaunchStore<kInt8, true, 256>(a, m, packed, out_scale, n, k, c, schedule, stream);
  }
  return LaunchStore<kInt8, kOneWait, 128>(a, m, packed, out_scale, n, k, c, schedule, stream);
}

// The options' square knobs: waits a K tile (1 or 2), consumers (2), tokens, grid, store.
template <bool kInt8>
absl::Status LaunchKnobs(const void* a, int64_t m, const void* packed, float out_scale, int64_t n,
                         int64_t k, float* c, const SwapAbOptions& options, cudaStream_t stream) {
  const int waits = options.square_waits == 0 ? kSquareWaits : options.square_waits;
  const int consumers = options.warpgroups;
  const int tokens = options.square_tokens == 0 ? kSquareTokens : options.square_tokens;
  if (waits != 1 && waits != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the square swap-AB kernel waits 1 or 2 times a K tile; got ", waits));
  }
  if (consumers != 0 && consumers != kConsumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the square swap-AB kernel takes 2 consumer warpgroups; got ", consumers));
  }
  if (tokens != 128 && tokens != 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("the square swap-AB kernel takes blocks of 128 or 256 tokens; got ", tokens));
  }
  if (options.square_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the square swap-AB kernel's persistent blocks are at least 1 (0: one an "
                     "SM); got ",
                     options.square_blocks));
  }
  // Unless the options say: persistent blocks and TMA-stored C up to kPersistentItems
  // items an SM.
  int grid = options.square_grid, store = options.square_store;
  if (grid == 0 || store == 0) {
    const int block_tokens = k > kLongK ? 64 : tokens;
    const int64_t items = (n + BlockRows(block_tokens) - 1) / BlockRows(block_tokens) *
                          ((m + block_tokens - 1) / block_tokens);
    const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
    if (!facts.ok()) return facts.status();
    const bool few = items <= int64_t{kPersistentItems} * facts->sms;
    if (grid == 0) grid = few ? 2 : 1;
    if (store == 0) store = few ? 2 : 1;
  }
  if (grid != 1 && grid != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the square swap-AB grid is 1 (a block an item) or 2 (persistent); got ", grid));
  }
  if (store != 1 && store != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the square swap-AB epilogue stores from registers (1) or by TMA (2); got ", store));
  }
  if (store == 2 && options.square_store == 2 && waits != 1) {
    return absl::InvalidArgumentError(
        "the square swap-AB kernel's TMA-stored epilogue takes one wait a K tile");
  }
  // TMA needs C 16-byte aligned (its rows are: n % 16 == 0); elsewhere C goes from registers.
  const Schedule schedule{grid == 2, options.square_blocks,
                          store == 2 && waits == 1 && Aligned16(c)};
  return waits == 1
             ? LaunchTokens<kInt8, true>(a, m, packed, out_scale, n, k, c, tokens, schedule, stream)
             : LaunchTokens<kInt8, false>(a, m, packed, out_scale, n, k, c, tokens, schedule,
                                          stream);
}

absl::Status CheckRows(int64_t m) {
  if (m < 1 || m > kSwapAbWgmmaMaxM) {
    return absl::InvalidArgumentError(absl::StrCat("the square swap-AB kernel takes 1 to ",
                                                   kSwapAbWgmmaMaxM, " rows of A; got ", m));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchSquareSwapAbWgmma(bool int8, const void* a, int64_t m, const void* packed,
                                     float out_scale, int64_t n, int64_t k, float* c,
                                     const SwapAbOptions& options, cudaStream_t stream) {
  GEMMD_GPU_RETURN_IF_ERROR(CheckRows(m));
  return int8 ? LaunchKnobs<true>(a, m, packed, out_scale, n, k, c, options, stream)
              : LaunchKnobs<false>(a, m, packed, out_scale, n, k, c, options, stream);
}

}  // namespace gemmd::gpu::internal
