// The swap-AB kernel for many tokens (quant_swapab_wgmma.h, LaunchSquareSwapAbWgmma): C^T =
// W * A^T on Hopper's warpgroup MMA, the decoded weight as wgmma's A operand from
// registers, 128 tokens of activations as its B from shared memory.
//
// Why: the square kernels (quant_square_nvfp4_sm90a.cu) decode both operands into FP16
// tiles in shared memory, and those writes and the wgmmas' reads of them bound the kernel
// at about half the dense FP16 rate. Here the weight never passes through shared memory
// decoded: each lane decodes its 16 code bytes of a super-tile (kernels/quant_prepack.h)
// straight into its A fragments, a few operations for a 64 x 128 x 64 piece of work, and
// the activations arrive by TMA as the dense kernel's B does.
// How: a block of one producer warpgroup and two consumer warpgroups owns a band of 256
// weight rows (two sets of 64 rows a warpgroup) and 128 tokens, or half a band (one set a
// warpgroup) and 256 tokens (FP16 A past 8192 of K: 64 tokens, the accumulators added
// into FP32 sums every 1024 of K). One producer thread fills a ring of stages, each one K
// tile of 64: the block's codes (values) in one bulk copy, its scale bytes in another, and
// one TMA box of the tokens' activations (128-byte swizzle, zeros past k and m); NVFP4 A
// arrives as codes, and the producer warpgroup's 128 threads decode one or two tokens each
// into the stage's FP16 rows. A consumer warp decodes its 16-row tile of a set into A
// fragments and issues four m64nNk16 wgmmas; it decodes both sets and waits once a K tile
// (or waits for each set's before decoding the other): the two consumer warpgroups
// overlap each other's decode. (Waiting with one set's wgmmas still in flight made ptxas
// serialize them all.) A stage goes back to the producer once both sets' wgmmas that
// read it have retired. The epilogue stores each accumulator straight to C: the 8 lanes
// of a row group write 32 consecutive bytes of one token's row, whole sectors.
// Built only for sm_90a.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
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
// A block's weight rows: a whole band, or half of one with 256 tokens (one set of 64 rows
// a consumer warpgroup, m64n256k16).
constexpr int BlockRows(int tokens) { return tokens == 256 ? kBandRows / 2 : kBandRows; }
static_assert(kBandRows == 256, "the layout's bands are 256 rows");

constexpr int kLongK = 8192;        // past this, FP16 A's sums are promoted (kTokens = 64)
constexpr int kSquareTokens = 128;  // a block's tokens unless the options say
constexpr int kSquareWaits = 1;     // waits a K tile unless they say (the faster: KERNELS.md)
constexpr int kCodeRowBytes = swapab::kSuperTileK / 2;  // NVFP4 A: a token's codes of a K tile

// A stage: the activations of one K tile ([kTokens][64 halves], 128-byte swizzle), the
// block's codes (values) and scales, and for NVFP4 A the tokens' codes as they arrive.
template <bool kInt8, bool kNvfp4A, int kTokens>
struct Ring {
  static constexpr int kTiles = BlockRows(kTokens) / 16;               // the block's 16-row tiles
  static constexpr int kActBytes = kTokens * swapab::kSuperTileK * 2;  // a K tile's activations
  static constexpr int kTileBytes = swapab::kTileBytes<kInt8>;
  static constexpr int kScaleBytes = kInt8 ? 0 : swapab::kScaleTileBytes;
  static constexpr int kCodesAt = kActBytes;
  static constexpr int kScalesAt = kCodesAt + kTiles * kTileBytes;
  static constexpr int kRawAt = kScalesAt + kTiles * kScaleBytes;
  static constexpr int kRawBytes = kNvfp4A ? kTokens * kCodeRowBytes : 0;
  static constexpr int kStageBytes = (kRawAt + kRawBytes + 1023) / 1024 * 1024;
  static constexpr int kStages = (227 * 1024 - 1024 - 3 * 16 * 8) / kStageBytes;
  static constexpr int kBarriersAt = kStages * kStageBytes;
  static constexpr int kSmemBytes = kBarriersAt + 3 * kStages * 8 + 1024;  // + alignment
  static_assert(kStages >= 4 && kStages <= 16, "a ring of 4 to 16 stages");
  static_assert(kSmemBytes <= 227 * 1024, "one block an SM");
};

// kNvfp4A: A is NVFP4 (codes [m, k/2] through map_a, E4M3 scales [m, k/16] at a_scales),
// decoded by the producer warpgroup into the stage's FP16 activations; else FP16 through
// map_a. kOneWait: a consumer decodes both sets, then issues their wgmmas and waits once a
// K tile; else it waits for each set's before decoding the next. kTokens: 128; 256, on half
// a band (m64n256k16: each weight fragment decoded once for twice the products); or 64
// with the accumulators added into FP32 sums every kPromoteTiles K tiles (for long K: one
// FP32 chain over 8192 of K already errs by 7e-6 against FP64, and the error grows with
// it). Each consumer warpgroup owns two sets of 64 rows (256 tokens: one).
template <bool kInt8, bool kNvfp4A, bool kOneWait, int kTokens>
__global__ void __launch_bounds__(kThreads, 1)
    SquareSwapAbKernel(const __grid_constant__ CUtensorMap map_a,
                       const uint8_t* __restrict__ a_scales, const uint8_t* __restrict__ packed,
                       float out_scale, int m, int n, int k_tiles, float* __restrict__ c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using R = Ring<kInt8, kNvfp4A, kTokens>;
  constexpr int kStages = R::kStages, kActBytes = R::kActBytes, kTiles = R::kTiles;
  constexpr bool kPromote = kTokens == 64;
  constexpr int kPromoteTiles = 16;
  static_assert(kTokens == 128 || kTokens == 256 || (kTokens == 64 && !kNvfp4A),
                "128 or 256 tokens, or 64 of FP16 A");
  constexpr int kSets = kTiles * 16 / 64 / kConsumers;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-aligned
  unsigned char* const base_ptr = smem_raw + (base - raw);
  // Per stage: "full" (the copies' bytes), "empty" (both consumer warpgroups done) and, for
  // NVFP4 A, "ready" (the 128 decoding threads done).
  const uint32_t full = base + R::kBarriersAt, empty = full + kStages * 8;
  const uint32_t ready = empty + kStages * 8;
  const int wg = static_cast<int>(threadIdx.x) / 128;
  // The block's tiles of its band (a band's tiles are consecutive at each K tile, and its K
  // tiles consecutive: the block reads `tiles` of them from `tile0` on) and its tokens.
  constexpr int kParts = swapab::kBandTiles / kTiles;  // blocks a band
  const int row_tiles = n / 16, band = static_cast<int>(blockIdx.x) / kParts;
  const int band_tiles = min(swapab::kBandTiles, row_tiles - band * swapab::kBandTiles);
  const int tile0 = static_cast<int>(blockIdx.x) % kParts * kTiles;
  const int tiles = min(kTiles, band_tiles - tile0);  // >= 1: the grid covers n in blocks
  const int64_t band_at = static_cast<int64_t>(band) * swapab::kBandTiles * k_tiles + tile0;
  const int m0 = static_cast<int>(blockIdx.y) * kTokens;
  if (threadIdx.x == 0) {
    InitRingBarriers<kStages>(full, empty, kConsumers);
    if constexpr (kNvfp4A) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) MbarInit(ready + s * 8, 128);
      MbarInitFence();
    }
  }
  __syncthreads();

  if (wg == 0) {
    // Thread 0 fills stage kt % kStages with K tile kt (once the consumers gave it back).
    const uint8_t* const scales = packed + static_cast<int64_t>(n) * k_tiles * 32;  // NVFP4
    const auto fill = [&](int kt) {
      const int s = kt % kStages;
      if (kt >= kStages) MbarWait(empty + s * 8, ((kt / kStages) + 1) & 1);
      const uint32_t stage = base + s * R::kStageBytes;
      MbarArriveExpectTx(full + s * 8, (kNvfp4A ? R::kRawBytes : kActBytes) +
                                           tiles * (R::kTileBytes + R::kScaleBytes));
      const int64_t first = band_at + static_cast<int64_t>(kt) * band_tiles;
      BulkLoad(stage + R::kCodesAt, packed + first * R::kTileBytes, tiles * R::kTileBytes,
               full + s * 8);
      if constexpr (!kInt8) {
        BulkLoad(stage + R::kScalesAt, scales + first * R::kScaleBytes, tiles * R::kScaleBytes,
                 full + s * 8);
      }
      if constexpr (kNvfp4A) {
        TmaLoad3d(stage + R::kRawAt, &map_a, kt * kCodeRowBytes, m0, 0, full + s * 8);
      } else {
        TmaLoad3d(stage, &map_a, kt * swapab::kSuperTileK, m0, 0, full + s * 8);
      }
    };
    if constexpr (!kNvfp4A) {
      SetMaxRegistersDown<40>();
      for (int kt = 0; kt < k_tiles && threadIdx.x == 0; ++kt) fill(kt);
      return;
    } else {
      // Thread 0 fills kStages - 2 K tiles ahead of the decode: waiting for a stage to come
      // back then holds the decode at most two K tiles ahead of the consumers, never less
      // than one. Thread t decodes tokens m0 + t (and m0 + t + 128 with 256 tokens): its 32
      // code bytes of the K tile into its swizzled row of 64 halves, with its 4 scale bytes
      // (read from global memory four K tiles ahead into a ring of registers; zeros past m,
      // as TMA gives the codes).
      constexpr int kAhead = kStages - 2, kScalesAhead = 4, kMine = kTokens / 128;
      SetMaxRegistersDown<kMine == 2 ? 72 : 56>();  // two tokens' scale rings
      const int t = static_cast<int>(threadIdx.x);
      for (int kt = 0; kt < min(kAhead, k_tiles) && t == 0; ++kt) fill(kt);
      const uint32_t* scale_row[kMine];
      bool live[kMine];
      uint32_t ring[kMine][kScalesAhead];
#pragma unroll
      for (int p = 0; p < kMine; ++p) {
        const int token = m0 + t + 128 * p;
        live[p] = token < m;
        scale_row[p] = reinterpret_cast<const uint32_t*>(
            a_scales + static_cast<int64_t>(live[p] ? token : 0) * k_tiles * 4);
#pragma unroll
        for (int j = 0; j < kScalesAhead; ++j) {
          ring[p][j] = live[p] && j < k_tiles ? scale_row[p][j] : 0u;
        }
      }
      for (int kt = 0; kt < k_tiles; ++kt) {
        if (t == 0 && kt + kAhead < k_tiles) fill(kt + kAhead);
        // The ring's slot kt % 4, rotated so the index stays a constant.
        uint32_t sc[kMine];
#pragma unroll
        for (int p = 0; p < kMine; ++p) {
          sc[p] = ring[p][0];
#pragma unroll
          for (int j = 0; j + 1 < kScalesAhead; ++j) ring[p][j] = ring[p][j + 1];
          ring[p][kScalesAhead - 1] =
              live[p] && kt + kScalesAhead < k_tiles ? scale_row[p][kt + kScalesAhead] : 0u;
        }
        const int s = kt % kStages;
        MbarWait(full + s * 8, (kt / kStages) & 1);
        unsigned char* const stage = base_ptr + s * R::kStageBytes;
#pragma unroll
        for (int p = 0; p < kMine; ++p) {
          const int row = t + 128 * p;
          const uint4* const codes =
              reinterpret_cast<const uint4*>(stage + R::kRawAt + row * kCodeRowBytes);
          const uint4 q[2] = {codes[0], codes[1]};
#pragma unroll
          for (int chunk = 0; chunk < 8; ++chunk) {
            // Chunk c: values 8c .. 8c + 7, of the 16-value scale block c / 2.
            const uint32_t scale2 = nvfp4::ScaleHalf2((sc[p] >> (8 * (chunk / 2))) & 0xFFu);
            const uint4 h = nvfp4::DecodeWord<false>(swapab::Word(q[chunk / 4], chunk % 4), scale2);
            *reinterpret_cast<uint4*>(stage + SwizzledChunk(row, chunk)) = h;
          }
        }
        FenceProxyAsync();  // the wgmmas read these rows through the async proxy
        MbarArrive(ready + s * 8);
      }
      return;
    }
  }

  // The registers the producer warpgroup gave back. setmaxnreg.inc waits until the block's
  // pool has them, and the pool is what the launch gave (384 threads x 168), so the
  // consumers take only what the producer released: 128 x (168 - 40) = 256 x (232 - 168),
  // or with NVFP4 A 128 x (168 - 56 or 72) >= 256 x (216 - 168).
  if constexpr (kNvfp4A) {
    SetMaxRegistersUp<216>();
  } else {
    SetMaxRegistersUp<232>();
  }
  const int consumer = wg - 1, warp = static_cast<int>(threadIdx.x) / 32 % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float acc[kSets][kTokens / 2], sums[kSets][kPromote ? kTokens / 2 : 1];
#pragma unroll
  for (int set = 0; set < kSets; ++set) {
#pragma unroll
    for (int i = 0; i < kTokens / 2; ++i) {
      acc[set][i] = 0.0f;
      if constexpr (kPromote) sums[set][i] = 0.0f;
    }
  }
  uint32_t a[kSets][4][4];
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    MbarWait(full + s * 8, (kt / kStages) & 1);
    if constexpr (kNvfp4A) MbarWait(ready + s * 8, (kt / kStages) & 1);
    const unsigned char* stage = base_ptr + s * R::kStageBytes;
    const uint64_t desc_b = SmemDesc(base + s * R::kStageBytes);
    // Tiles past n decode from a mask (no branch near the registers a wgmma reads).
    const auto decode = [&](int set) {
      const int tile = (consumer * kSets + set) * 4 + warp;
      const uint32_t keep = tile < tiles ? ~0u : 0u;
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

  // Accumulator i of a set: row 16 warp + g (+8 for i % 4 >= 2), token 8 (i / 4) + 2t + i % 2.
  const float* row_scales = reinterpret_cast<const float*>(
      packed + static_cast<int64_t>(n) * k_tiles * swapab::kSuperTileK);  // INT8's
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int set = 0; set < kSets; ++set) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row =
          band * kBandRows + tile0 * 16 + (consumer * kSets + set) * 64 + 16 * warp + g + 8 * h;
      if (row >= n) continue;
      const float scale = kInt8 ? out_scale * row_scales[row] : out_scale;
#pragma unroll
      for (int j = 0; j < kTokens / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int token = m0 + 8 * j + 2 * t + e;
          float v;
          if constexpr (kPromote) {
            v = sums[set][4 * j + 2 * h + e];
          } else {
            v = acc[set][4 * j + 2 * h + e];
          }
          if (token < m) c[static_cast<int64_t>(token) * n + row] = v * scale;
        }
      }
    }
  }
#else
  __trap();  // only the sm_90a image of this kernel is ever launched
#endif
}

template <bool kInt8, bool kNvfp4A, bool kOneWait, int kTokens>
absl::Status Launch(const void* a, const void* a_scales, int64_t m, const void* packed,
                    float out_scale, int64_t n, int64_t k, float* c, cudaStream_t stream) {
  using R = Ring<kInt8, kNvfp4A, kTokens>;
  const auto kernel = &SquareSwapAbKernel<kInt8, kNvfp4A, kOneWait, kTokens>;
  static std::atomic<uint64_t> configured{0};
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kernel), R::kSmemBytes, &configured));
  // A [m, k] in boxes of one K tile x 128 tokens: FP16 swizzled as wgmma reads it, or
  // NVFP4 codes as stored.
  CUtensorMap map_a{};
  GEMMD_GPU_RETURN_IF_ERROR(kNvfp4A ? MakeTensorMap3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a,
                                                      k / 2, m, k / 2, 0, 1, kCodeRowBytes, kTokens,
                                                      1, /*swizzle=*/false)
                                    : MakeTensorMap3d(&map_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a,
                                                      k, m, k, 0, 1, swapab::kSuperTileK, kTokens));
  constexpr int kBlockRows = BlockRows(kTokens);
  const dim3 grid(static_cast<unsigned>((n + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>((m + kTokens - 1) / kTokens));
  kernel<<<grid, kThreads, R::kSmemBytes, stream>>>(
      map_a, static_cast<const uint8_t*>(a_scales), static_cast<const uint8_t*>(packed), out_scale,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k / swapab::kSuperTileK), c);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// The tokens a block: 128, or 256 (`tokens`), except 64 for FP16 A past kLongK, with its
// sums promoted (NVFP4 A's products have few significant bits, and one chain keeps them to
// 5e-8 at 8192 of K).
template <bool kInt8, bool kNvfp4A, bool kOneWait>
absl::Status LaunchTokens(const void* a, const void* a_scales, int64_t m, const void* packed,
                          float out_scale, int64_t n, int64_t k, float* c, int tokens,
                          cudaStream_t stream) {
  if constexpr (!kNvfp4A) {
    if (k > kLongK) {
      return Launch<kInt8, false, kOneWait, 64>(a, a_scales, m, packed, out_scale, n, k, c, stream);
    }
  }
  if (tokens == 256) {  // one set a consumer: one wait
    return Launch<kInt8, kNvfp4A, true, 256>(a, a_scales, m, packed, out_scale, n, k, c, stream);
  }
  return Launch<kInt8, kNvfp4A, kOneWait, 128>(a, a_scales, m, packed, out_scale, n, k, c, stream);
}

// The options' square knobs: waits a K tile (1 or 2), consumers (2), tokens.
template <bool kInt8, bool kNvfp4A>
absl::Status LaunchKnobs(const void* a, const void* a_scales, int64_t m, const void* packed,
                         float out_scale, int64_t n, int64_t k, float* c,
                         const SwapAbOptions& options, cudaStream_t stream) {
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
  return waits == 1 ? LaunchTokens<kInt8, kNvfp4A, true>(a, a_scales, m, packed, out_scale, n, k, c,
                                                         tokens, stream)
                    : LaunchTokens<kInt8, kNvfp4A, false>(a, a_scales, m, packed, out_scale, n, k,
                                                          c, tokens, stream);
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
  return int8 ? LaunchKnobs<true, false>(a, nullptr, m, packed, out_scale, n, k, c, options, stream)
              : LaunchKnobs<false, false>(a, nullptr, m, packed, out_scale, n, k, c, options,
                                          stream);
}

absl::Status LaunchSquareSwapAbNvfp4A(const void* a_codes, const void* a_scales, int64_t m,
                                      const void* packed, float out_scale, int64_t n, int64_t k,
                                      float* c, const SwapAbOptions& options, cudaStream_t stream) {
  GEMMD_GPU_RETURN_IF_ERROR(CheckRows(m));
  return LaunchKnobs<false, true>(a_codes, a_scales, m, packed, out_scale, n, k, c, options,
                                  stream);
}

}  // namespace gemmd::gpu::internal
