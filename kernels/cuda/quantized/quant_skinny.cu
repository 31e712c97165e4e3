// Skinny weight-only quantized GEMM (see quant_gemm.h): C[M,N] = A[M,K] * dequant(B)^T,
// B INT8 or NVFP4 streamed from HBM once, decoded in registers straight into mma.sync
// fragments, FP32 accumulation on the tensor cores.
//
// The MMA is m16n8k16 with the roles swapped: B's rows are the MMA's M side (16 weight
// rows per tile, no padding) and A's rows the N side (8 per tile), so M = 1 wastes 7/8 of
// a small MMA instead of 15/16 of a large one. Its K order is free (any permutation of K
// applied to both operands gives the same sum), which is what lets every lane decode 16
// contiguous bytes itself: lane (g = lane/4, t = lane%4) takes the bytes of weight rows g
// and g+8 at K offset t*(values per 16 bytes) of its chunk, and the MMA k-slots it owns
// are mapped onto exactly those K positions; its A (activation) fragment is read at the
// same positions. Earlier versions decoded into a shared tile for WMMA: ncu showed the
// decode/shared traffic, not HBM, setting the pace (docs/KERNELS.md).
//
// Exactness: NVFP4 codes become FP16 bits s<<15 | code<<9, which is e2m1 * 2^-14 exactly
// (E2M1's subnormal 0.5 lands on FP16's subnormal range); one HMUL2 by the E4M3 block
// scale then gives e2m1 * e4m3 * 2^-14, a multiple of 2^-24 with at most 6 significant
// bits, so exact in FP16 (subnormals included); 2^14 and the tensor scale are applied to
// the FP32 sums in the epilogue. INT8 codes become FP16 through the 0x6400 exponent trick
// (exact); the per-row scale goes in the epilogue.
//
// Grid: blocks of kWarps warps own kRowTiles*16 weight rows; a block chunk is the warps'
// chunks side by side (warp w takes chunk w), so a block reads each row front to back.
// The warps add up in shared memory. Blocks also split K (grid.y, in whole block chunks)
// when there are too few row blocks to fill the GPU; they then add into C, which the
// launcher zeroes. Two ways to bring the bytes in:
// - the ring (FP16 A, M <= 8, aligned): the block copies its block chunks (codes, scales,
//   A's rows) into a shared-memory ring with cp.async, whole rows per copy instruction,
//   and the warps read their fragment bytes from there (see the kernel for why);
// - the register path (everything else): each lane loads its own 16 bytes from HBM.
// A third way, for FP16 A of 9-64 rows, is its own kernel with 128-row blocks
// (quant_skinny_stream.cu); LaunchSkinnyQuantizedGemm picks it when it fits the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_facts.h"
#include "kernels/cuda/quantized/quant_gemm.h"
#include "kernels/cuda/quantized/quant_skinny_device.cuh"
#include "kernels/cuda/quantized/quant_skinny_stream.h"

namespace gemmd::gpu {
namespace {

using namespace skinny;  // NOLINT: the shared device helpers

constexpr int kWarps = 8;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// What one lane loads per weight row per chunk: 16 bytes (NVFP4: 32 values and their
// two scale bytes; INT8: 16 values).
template <QuantFormat kFormat>
struct Layout {
  static constexpr int kValuesPerLane = kFormat == QuantFormat::kNvfp4 ? 32 : 16;
  static constexpr int kChunk = 4 * kValuesPerLane;  // K per warp iteration (4 lanes/row)
  static constexpr int kValuesPerWord = kValuesPerLane / 4;
};

struct RowBytes {
  uint4 data;
  uint32_t scales;  // NVFP4: the segment's two E4M3 bytes (low 16 bits)
};

__device__ __forceinline__ uint4 LoadStreaming(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The register path's load of the lane's 16 bytes of one weight row at `d` (scale bytes
// at `s`), of which the first `remaining` values are inside K (or the block's slice);
// zeros for the rest. kAligned: 16-byte aligned and whole-or-nothing (the launcher
// checks K and the pointers); otherwise gathered byte by byte. kGuard = false: the
// caller knows the segment is inside (no test, no branch).
template <QuantFormat kFormat, bool kAligned, bool kGuard>
__device__ __forceinline__ RowBytes LoadRow(const uint8_t* __restrict__ d,
                                            const uint8_t* __restrict__ s, int remaining) {
  RowBytes r{make_uint4(0, 0, 0, 0), 0};
  if (kAligned) {
    if (!kGuard || remaining > 0) {
      r.data = LoadStreaming(d);
      if (kFormat == QuantFormat::kNvfp4) {
        r.scales = __ldg(reinterpret_cast<const unsigned short*>(s));
      }
    }
    return r;
  }
  uint32_t w[4] = {0, 0, 0, 0};
  constexpr int kPerByte = kFormat == QuantFormat::kNvfp4 ? 2 : 1;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (i * kPerByte < remaining) w[i / 4] |= uint32_t{__ldg(d + i)} << (8 * (i % 4));
  }
  r.data = make_uint4(w[0], w[1], w[2], w[3]);
  if (kFormat == QuantFormat::kNvfp4) {  // K % 16 == 0: a scale's group is whole or out
    if (remaining > 0) r.scales = __ldg(s);
    if (remaining > 16) r.scales |= uint32_t{__ldg(s + 1)} << 8;
  }
  return r;
}

// The lane's kCount A values at `p` (halves; the first `remaining` inside K) as packed
// pairs, zeros past K.
template <int kCount, bool kAligned>
__device__ __forceinline__ void LoadA(const __half* __restrict__ p, int remaining,
                                      uint32_t* out) {
#pragma unroll
  for (int i = 0; i < kCount / 2; ++i) out[i] = 0;
  if (kAligned) {
    if (remaining <= 0) return;
    if (kCount == 8) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
      out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
      out[0] = v.x, out[1] = v.y;
    }
    return;
  }
  const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    if (i < remaining) out[i / 2] |= uint32_t{__ldg(q + i)} << (16 * (i % 2));
  }
}

template <int kRowTiles>
struct Chunk {
  RowBytes row[kRowTiles][2];  // rows g and g+8 of each 16-row tile
};

// Shared memory for the warps' partial sums: [warp][row in block][m].
template <int kRowTiles, int kMTiles>
struct ReduceSmem {
  float partial[kWarps][kRowTiles * 16][kMTiles * 8 + 1];
};

// The ring: kStages stages, each the block's rows x one block chunk
// (every warp's chunk side by side: 16 bytes per lane, 512 per row), then (NVFP4) the
// same rows' scale bytes (64 per row). Rows are padded so that a warp's reads (rows g
// and g + 8 of a tile, the lane's t-th piece) hit different banks: by 64 bytes for the
// codes (the 8 lanes of a read phase are rows g, g + 1), to 72 bytes for the scales.
// The partial sums reuse the same (dynamic) shared memory after the loop.
constexpr int kStageRowBytes = kWarps * 64;
constexpr int kStageRowPitch = kStageRowBytes + 64;
constexpr int kStageScaleBytes = kStageRowBytes / 8;  // NVFP4: one per 16 values
constexpr int kStageScalePitch = kStageScaleBytes + 8;

// The stage also holds A's m rows (FP16, at most 8) of the block chunk (rows padded by
// 16 bytes: a read phase covers rows g, g + 1), so its size depends on m. Stages start
// on 1 KiB boundaries, which measured faster than stages packed back to back
// (docs/KERNELS.md).
template <QuantFormat kFormat>
constexpr int kStageARowPitch = kWarps * Layout<kFormat>::kChunk * 2 + 16;

template <QuantFormat kFormat, int kRowTiles>
__host__ __device__ constexpr int StageBytes(int m) {
  return (kRowTiles * 16 *
              (kStageRowPitch + (kFormat == QuantFormat::kNvfp4 ? kStageScalePitch : 0)) +
          m * kStageARowPitch<kFormat> + 1023) /
         1024 * 1024;
}

// Which variants stream through the ring: FP16 A of up to 8 rows, aligned operands, a
// ring depth (kStages) other than kRegisterPath. The others keep the register path,
// which measured faster for them (docs/KERNELS.md).
constexpr int kRegisterPath = 0;

template <int kMTiles, bool kSplit, bool kAligned, int kStages>
constexpr bool kUsesRing = kStages != kRegisterPath && kAligned && kMTiles == 1 && !kSplit;

template <QuantFormat kFormat, int kRowTiles, int kMTiles, bool kSplit, int kStages, bool kAligned>
constexpr size_t SkinnySmemBytes(int m) {
  const size_t ring = kUsesRing<kMTiles, kSplit, kAligned, kStages>
                          ? size_t{kStages} * StageBytes<kFormat, kRowTiles>(m)
                          : 0;
  constexpr size_t reduce = sizeof(ReduceSmem<kRowTiles, kMTiles>);
  return ring > reduce ? ring : reduce;
}

// kMTiles: A rows / 8 (rounded up); kSplit: FP32 / BF16 A as FP16 hi + lo (two MMAs). K fits in
// 31 bits (the launcher checks), so K offsets are 32-bit; row offsets are 64-bit.
template <QuantFormat kFormat, int kRowTiles, int kMTiles, bool kSplit, bool kAligned,
          int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    SkinnyKernel(const __half* __restrict__ a_hi, const __half* __restrict__ a_lo,
                 const float* __restrict__ a_row_scale, int m,
                 const uint8_t* __restrict__ data, const uint8_t* __restrict__ scales,
                 float tensor_scale, int64_t n, int k, int k_per_block, float* __restrict__ c) {
  using L = Layout<kFormat>;
  constexpr int kParts = kSplit ? 2 : 1;
  constexpr int kRows = kRowTiles * 16;
  constexpr int kBytesPerValueX2 = kFormat == QuantFormat::kNvfp4 ? 1 : 2;  // bytes * 2
  extern __shared__ uint4 smem_raw[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t{blockIdx.x} * kRows;
  const int k_begin = blockIdx.y * k_per_block;
  const int k_end = min(k_begin + k_per_block, k);
  const int stride = kWarps * L::kChunk;
  const int lane_k = t * L::kValuesPerLane;  // the lane's segment within a chunk

  // The lane's weight rows (g and g+8 of each tile) and A rows (g of each 8-row tile),
  // resolved once. Rows past N or M are clamped to the last one: they only feed columns
  // / rows of the MMA result that the epilogue drops.
  const uint8_t* row_data[kRowTiles][2];
  const uint8_t* row_scales[kRowTiles][2];
#pragma unroll
  for (int rt = 0; rt < kRowTiles; ++rt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = min(n0 + rt * 16 + g + 8 * h, n - 1);
      row_data[rt][h] = data + row * k * kBytesPerValueX2 / 2 + lane_k * kBytesPerValueX2 / 2;
      row_scales[rt][h] = scales + row * (k / 16) + lane_k / 16;
    }
  }
  const __half* a_row[kParts][kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const int64_t offset = int64_t{min(mt * 8 + g, m - 1)} * k + lane_k;
    a_row[0][mt] = a_hi + offset;
    if (kSplit) a_row[kParts - 1][mt] = a_lo + offset;
  }

  // The register path's loads (the ring path copies through shared memory below).
  // Offsets from the lane's row pointers are unsigned, so the 64-bit add needs no sign
  // extension. A chunk wholly inside K (all but a warp's last) loads without tests.
  auto load = [&](int kc, Chunk<kRowTiles>* out) {
    const int remaining = k_end - (kc + lane_k);
    const unsigned data_offset = static_cast<unsigned>(kc) * kBytesPerValueX2 / 2;
    const unsigned scale_offset = static_cast<unsigned>(kc) / 16;
    const bool full = kAligned && kc + L::kChunk <= k_end;
#pragma unroll
    for (int rt = 0; rt < kRowTiles; ++rt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        out->row[rt][h] =
            full ? LoadRow<kFormat, kAligned, false>(row_data[rt][h] + data_offset,
                                                     row_scales[rt][h] + scale_offset, remaining)
                 : LoadRow<kFormat, kAligned, true>(row_data[rt][h] + data_offset,
                                                    row_scales[rt][h] + scale_offset, remaining);
      }
    }
  };

  float acc[kRowTiles][kMTiles][4];
#pragma unroll
  for (int rt = 0; rt < kRowTiles; ++rt) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.0f;
    }
  }

  // Decodes one chunk and runs its MMAs. Lane (g, t) owns the MMA k-slots 2t, 2t+1,
  // 2t+8, 2t+9 of rows g and g+8; each step maps them onto four of the K positions it
  // loaded, and reads A at the same positions.
  constexpr bool kRing = kUsesRing<kMTiles, kSplit, kAligned, kStages>;
  const uint8_t* a_stage_lane[kMTiles] = {};  // kRing: the lane's A values of this chunk
  auto compute = [&](const Chunk<kRowTiles>& cur, int kc) {
    const int remaining = k_end - (kc + lane_k);
    // A's values at a word's K positions for each 8-row tile of A. With few A rows all
    // of the chunk's are loaded first, so their (L1) latency overlaps the decode; with
    // more, word by word (registers).
    constexpr bool kPreloadA = kMTiles * kParts <= 2;
    uint32_t av[kPreloadA ? 4 : 1][kParts][kMTiles][L::kValuesPerWord / 2];
    auto load_a = [&](int word, uint32_t (&dst)[kParts][kMTiles][L::kValuesPerWord / 2]) {
      if constexpr (kRing) {  // zero-filled past K by the copies
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          const uint8_t* p = a_stage_lane[mt] + word * L::kValuesPerWord * 2;
          if constexpr (L::kValuesPerWord == 8) {
            const uint4 v = *reinterpret_cast<const uint4*>(p);
            dst[0][mt][0] = v.x, dst[0][mt][1] = v.y, dst[0][mt][2] = v.z, dst[0][mt][3] = v.w;
          } else {
            const uint2 v = *reinterpret_cast<const uint2*>(p);
            dst[0][mt][0] = v.x, dst[0][mt][1] = v.y;
          }
        }
      } else {
#pragma unroll
        for (int part = 0; part < kParts; ++part) {
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            LoadA<L::kValuesPerWord, kAligned>(a_row[part][mt] + static_cast<unsigned>(kc) +
                                                   word * L::kValuesPerWord,
                                               remaining - word * L::kValuesPerWord,
                                               dst[part][mt]);
          }
        }
      }
    };
    if (kPreloadA) {
#pragma unroll
      for (int word = 0; word < 4; ++word) load_a(word, av[kPreloadA ? word : 0]);
    }
#pragma unroll
    for (int rt = 0; rt < kRowTiles; ++rt) {
      uint32_t scale[2];  // NVFP4: [row g / g+8] the two blocks' scales as an FP16 pair
      if (kFormat == QuantFormat::kNvfp4) {
#pragma unroll
        for (int h = 0; h < 2; ++h) scale[h] = E4m3x2ToHalf2(cur.row[rt][h].scales);
      }
#pragma unroll
      for (int word = 0; word < 4; ++word) {
        if (!kPreloadA) load_a(word, av[0]);
        const auto& a_word = av[kPreloadA ? word : 0];
        uint32_t w[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4& d = cur.row[rt][h].data;
          w[h] = word == 0 ? d.x : word == 1 ? d.y : word == 2 ? d.z : d.w;
        }
        if (kFormat == QuantFormat::kNvfp4) {
          // Step 0 takes pairs (k0,k4) (k1,k5), step 1 (k2,k6) (k3,k7); the scale (one
          // per 16 values: words 0-1 and 2-3) makes them e2m1 * e4m3 * 2^-14, exactly.
          uint32_t p[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h) DecodeScaledE2m1Word(w[h], scale[h], word, p[h]);
#pragma unroll
          for (int step = 0; step < 2; ++step) {
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
              for (int part = 0; part < kParts; ++part) {
                const uint32_t* x = a_word[part][mt];  // halves k0..k7 as (k0,k1) (k2,k3) ..
                const uint32_t b0 = __byte_perm(x[step], x[step + 2], 0x5410);
                const uint32_t b1 = __byte_perm(x[step], x[step + 2], 0x7632);
                Mma(acc[rt][mt], p[0][2 * step], p[1][2 * step], p[0][2 * step + 1],
                    p[1][2 * step + 1], b0, b1);
              }
            }
          }
        } else {
          // Word = 4 int8 k0..k3 -> (k0,k1) (k2,k3): one step, natural order.
          uint32_t p[2][2];
#pragma unroll
          for (int h = 0; h < 2; ++h) DecodeInt8Word(w[h], p[h]);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int part = 0; part < kParts; ++part) {
              Mma(acc[rt][mt], p[0][0], p[1][0], p[0][1], p[1][1], a_word[part][mt][0],
                  a_word[part][mt][1]);
            }
          }
        }
      }
    }
  };

  if constexpr (kRing) {
    // The block copies its rows' next kStages - 1 block chunks into a shared ring with
    // cp.async while the warps decode the current one, warp w taking chunk w of every
    // row, as in the register path. The copies are laid out for HBM, not for the
    // fragments: each warp copy instruction is 512 contiguous bytes of one row. Loading
    // each lane's fragment bytes straight from HBM (8 rows x 64 bytes per instruction)
    // read the weight more slowly than whole-row pieces do (bench/read_pattern_bench.cu,
    // docs/KERNELS.md). The bytes in flight hold no registers, so the depth is free to
    // tune (3 stages: the fastest depth measured, docs/KERNELS.md).
    // The scale bytes travel in the same stage
    // (4-byte copies; loading them into registers per warp left the warps waiting for
    // them at decode, as ncu showed: docs/KERNELS.md).
    constexpr int kRows = kRowTiles * 16;
    constexpr int kCopiesPerThread = kRows * (kStageRowBytes / 16) / (kWarps * 32);
    constexpr int kScaleCopiesPerThread = kRows * (kStageScaleBytes / 4) / (kWarps * 32);
    constexpr int kValuesPer16Bytes = 32 / kBytesPerValueX2;
    constexpr bool kNvfp4 = kFormat == QuantFormat::kNvfp4;
    uint8_t* const ring = reinterpret_cast<uint8_t*>(smem_raw);
    constexpr int kScaleOffset = kRows * kStageRowPitch;  // within a stage
    constexpr int kAOffset = kScaleOffset + (kNvfp4 ? kRows * kStageScalePitch : 0);
    const int stage_bytes = StageBytes<kFormat, kRowTiles>(m);
    // The rows this thread copies (warp + 8j) and its 16 bytes of each; the rows and
    // 4-byte pieces of scales it copies (thread p + 256j: row p / 16, piece p % 16).
    const uint8_t* copy_src[kCopiesPerThread];
#pragma unroll
    for (int j = 0; j < kCopiesPerThread; ++j) {
      const int64_t row = min(n0 + warp + kWarps * j, n - 1);
      copy_src[j] = data + row * k * kBytesPerValueX2 / 2 + lane * 16;
    }
    const int scale_piece = threadIdx.x % 16;
    const uint8_t* scale_src[kNvfp4 ? kScaleCopiesPerThread : 1];
    int scale_dst[kNvfp4 ? kScaleCopiesPerThread : 1];
    if constexpr (kNvfp4) {
#pragma unroll
      for (int j = 0; j < kScaleCopiesPerThread; ++j) {
        const int r = (threadIdx.x + kWarps * 32 * j) / 16;
        const int64_t row = min(n0 + r, n - 1);
        scale_src[j] = scales + row * (k / 16) + scale_piece * 4;
        scale_dst[j] = kScaleOffset + r * kStageScalePitch + scale_piece * 4;
      }
    }
    const int block_chunk = kWarps * L::kChunk;  // values
    auto issue = [&](int kb, int st) {
      if (kb < k_end) {
        const bool inside = kb + lane * kValuesPer16Bytes < k_end;  // whole or out
        const unsigned offset = inside ? static_cast<unsigned>(kb) * kBytesPerValueX2 / 2 : 0;
        uint8_t* const stage = ring + st * stage_bytes;
#pragma unroll
        for (int j = 0; j < kCopiesPerThread; ++j) {
          CpAsync16(reinterpret_cast<uint4*>(stage + (warp + kWarps * j) * kStageRowPitch +
                                               lane * 16),
                      copy_src[j] + offset, inside ? 16 : 0);
        }
        if constexpr (kNvfp4) {  // a piece is 4 scales = 64 values: whole or out (K % 64)
          const bool piece_inside = kb + scale_piece * 64 < k_end;
          const unsigned scale_offset = piece_inside ? static_cast<unsigned>(kb) / 16 : 0;
#pragma unroll
          for (int j = 0; j < kScaleCopiesPerThread; ++j) {
            CpAsync4(stage + scale_dst[j], scale_src[j] + scale_offset, piece_inside ? 4 : 0);
          }
        }
        {
          // A's m rows of the block chunk, 16 bytes per copy. Read through L1 instead,
          // the first use of A was the top stall of the kernel (ncu, docs/KERNELS.md):
          // those loads queue behind the stage copies.
          constexpr int kPiecesPerRow = kWarps * L::kChunk / 8;
          for (int p = threadIdx.x; p < m * kPiecesPerRow; p += kWarps * 32) {
            const int r = p / kPiecesPerRow, q = p % kPiecesPerRow;
            const bool in = kb + q * 8 < k_end;
            CpAsync16(reinterpret_cast<uint4*>(stage + kAOffset + r * kStageARowPitch<kFormat> +
                                                 q * 16),
                        a_hi + int64_t{r} * k + (in ? kb + q * 8 : 0), in ? 16 : 0);
          }
        }
      }
      CpAsyncCommit();  // one group per call, empty or not, so wait_group counts stages
    };
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) issue(k_begin + st * block_chunk, st);
    for (int kb = k_begin; kb < k_end; kb += kStages * block_chunk) {
#pragma unroll
      for (int st = 0; st < kStages; ++st) {
        const int kbs = kb + st * block_chunk;
        CpAsyncWait<kStages - 2>();  // this thread's copies of stage st have landed
        __syncthreads();  // everyone's have; and everyone is done with stage st - 1
        issue(kbs + (kStages - 1) * block_chunk, (st + kStages - 1) % kStages);
        const int kw = kbs + warp * L::kChunk;
        if (kw < k_end) {
          Chunk<kRowTiles> cur;
          const uint8_t* const stage = ring + st * stage_bytes;
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            a_stage_lane[mt] = stage + kAOffset +
                               min(mt * 8 + g, m - 1) * kStageARowPitch<kFormat> +
                               (warp * L::kChunk + lane_k) * 2;
          }
#pragma unroll
          for (int rt = 0; rt < kRowTiles; ++rt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = rt * 16 + g + 8 * h;
              cur.row[rt][h].data = *reinterpret_cast<const uint4*>(
                  stage + r * kStageRowPitch + warp * 64 + t * 16);
              cur.row[rt][h].scales =
                  kNvfp4 ? *reinterpret_cast<const unsigned short*>(
                               stage + kScaleOffset + r * kStageScalePitch + warp * 8 + t * 2)
                         : 0u;
            }
          }
          compute(cur, kw);
        }
      }
    }
    CpAsyncWait<0>();
    __syncthreads();  // the partial sums below reuse the ring's shared memory
  } else {
    // Register path: each lane loads its own fragment bytes, kRegStages chunks in
    // flight per warp; a buffer is refilled as soon as its chunk has been decoded
    // (refilling before, from a copy, cost a register move per word). Two chunks for one
    // A tile; one where A rows need the registers (a second spilled at M = 16).
    constexpr int kRegStages = kMTiles == 1 ? 2 : 1;
    int kc = k_begin + warp * L::kChunk;
    Chunk<kRowTiles> buf[kRegStages];
#pragma unroll
    for (int st = 0; st < kRegStages; ++st) load(kc + st * stride, &buf[st]);
    for (; kc < k_end; kc += kRegStages * stride) {
#pragma unroll
      for (int st = 0; st < kRegStages; ++st) {
        const int ks = kc + st * stride;
        if (ks < k_end) compute(buf[st], ks);
        load(ks + kRegStages * stride, &buf[st]);
      }
    }
  }

  auto& smem = *reinterpret_cast<ReduceSmem<kRowTiles, kMTiles>*>(smem_raw);
  // Accumulator (row g / g+8 of the tile, A rows 2t, 2t+1) -> shared, then the block sums
  // its warps: consecutive threads take consecutive columns of C.
#pragma unroll
  for (int rt = 0; rt < kRowTiles; ++rt) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        smem.partial[warp][rt * 16 + g + 8 * (i / 2)][mt * 8 + 2 * t + i % 2] = acc[rt][mt][i];
      }
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kRows * kMTiles * 8; idx += kWarps * 32) {
    const int r = idx % kRows, mm = idx / kRows;
    const int64_t col = n0 + r;
    if (col >= n || mm >= m) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += smem.partial[w][r][mm];
    if (kSplit) sum *= __ldg(a_row_scale + mm);  // undo A's power-of-two row scale first
    const float v = kFormat == QuantFormat::kInt8
                        ? sum * __ldg(reinterpret_cast<const float*>(scales) + col)
                        : (sum * 16384.0f) * tensor_scale;  // undo the decode's 2^-14
    if (gridDim.y > 1) {
      atomicAdd(c + mm * n + col, v);
    } else {
      c[mm * n + col] = v;
    }
  }
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// A [m, k] FP32 or BF16 -> FP16 planes hi, lo [m, k] of a * 2^e (e per row): hi =
// fp16(a * 2^e), lo = fp16(a * 2^e - hi), and row_scale[row] = 2^-e for the epilogue.
// One block per row. e puts the row's largest magnitude in [2^14, 2^15): FP16's range
// ends at 65504, and below 2^-14 it has fewer significant bits (none below 2^-24), so
// unscaled, an activation of 1e5 became Inf and rows of ~1e-6 lost most of their
// precision. Scaled, hi + lo carries ~22 significant bits for every value within 2^-10
// of the row's largest, and the absolute error of the rest stays below 2^-38 of it.
// A row that is all zero or holds an Inf keeps e = 0; Inf and NaN reach C as they would
// in FP32 (an Inf's lo plane is 0).
template <typename T>
__global__ void SplitARows(const T* __restrict__ a, int k, __half* __restrict__ hi,
                           __half* __restrict__ lo, float* __restrict__ row_scale) {
  __shared__ float warp_max[32];
  const int64_t base = int64_t{blockIdx.x} * k;
  float max_abs = 0.0f;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    max_abs = fmaxf(max_abs, fabsf(ToFloat(a[base + i])));  // skips NaN
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    max_abs = fmaxf(max_abs, __shfl_xor_sync(0xFFFFFFFFu, max_abs, offset));
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = max_abs;
  __syncthreads();
  max_abs = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) max_abs = fmaxf(max_abs, warp_max[w]);
  // max_abs = m * 2^x with m in [0.5, 1): scale by 2^(15 - x) through ldexpf (2^e itself
  // may not be an FP32: 2^134 for a row of 2^-120), e <= 149 so that 2^-e stays nonzero.
  int x = 0;
  frexpf(max_abs, &x);
  const int e = max_abs > 0.0f && isfinite(max_abs) ? min(15 - x, 149) : 0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const float v = ldexpf(ToFloat(a[base + i]), e);  // exact, inside FP16's range
    const __half h = __float2half_rn(v);
    hi[base + i] = h;
    // An Inf's lo would be Inf - Inf = NaN, and C's row NaN instead of +-Inf.
    lo[base + i] = __float2half_rn(isfinite(v) ? v - __half2float(h) : 0.0f);
  }
  if (threadIdx.x == 0) row_scale[blockIdx.x] = ldexpf(1.0f, -e);
}

// A as the kernels read it: FP16 in place (lo and row_scale null), or the FP16 planes of
// a wider A scaled per row (SplitARows).
struct ActivationPlanes {
  const __half* hi;
  const __half* lo;
  const float* row_scale;
};

constexpr int kMaxCachedDevices = 64;

// Blocks of `kernel` resident per SM on `device` with `smem_bytes` of dynamic shared
// memory, after raising the kernel's shared-memory limit to that: queried once per
// device and kept in `cached` (one array per kernel), so a launch costs no driver queries
// (at ~15 us a kernel, host time between launches shows up in the stream).
template <typename Kernel>
absl::StatusOr<int> ResidentBlocksPerSm(Kernel kernel, int device, size_t smem_bytes,
                                        std::atomic<int> (&cached)[kMaxCachedDevices]) {
  if (device >= 0 && device < kMaxCachedDevices) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem_bytes)));
  int per_sm = 0;
  RETURN_IF_CUDA_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem_bytes));
  if (per_sm < 1) {  // a capability, not a fault: the launcher checks fit beforehand
    return absl::FailedPreconditionError(absl::StrCat(
        "skinny quantized kernel does not fit an SM (", smem_bytes, " bytes of shared memory)"));
  }
  if (device >= 0 && device < kMaxCachedDevices) {
    cached[device].store(per_sm, std::memory_order_relaxed);
  }
  return per_sm;
}

// One kernel configuration: kRowTiles 16-row weight tiles per warp, kMTiles 8-row A
// tiles, kStages ring stages (kRegisterPath: the register path), at least kMinBlocks
// blocks per SM (the register budget).
template <QuantFormat kFormat, int kRowTiles, int kMTiles, bool kSplit, bool kAligned,
          int kStages, int kMinBlocks>
absl::Status LaunchVariant(const ActivationPlanes& a, int64_t m,
                           const DeviceQuantizedWeight& b, float* c, int k_splits_override,
                           cudaStream_t stream) {
  using L = Layout<kFormat>;
  const auto kernel =
      SkinnyKernel<kFormat, kRowTiles, kMTiles, kSplit, kAligned, kStages, kMinBlocks>;
  // Shared memory for this m; the kernel's limit is raised once to what the largest m
  // of the variant needs (and the blocks per SM counted at that size).
  const size_t smem_bytes =
      SkinnySmemBytes<kFormat, kRowTiles, kMTiles, kSplit, kStages, kAligned>(static_cast<int>(m));
  constexpr size_t kMaxSmemBytes =
      SkinnySmemBytes<kFormat, kRowTiles, kMTiles, kSplit, kStages, kAligned>(kMTiles * 8);
  // Rows first; K is split over blocks only as far as needed for one full wave (a
  // partial second wave would nearly double the time of a kernel this short).
  const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
  if (!facts.ok()) return facts.status();
  static std::atomic<int> cached_per_sm[kMaxCachedDevices] = {};  // this variant's
  const absl::StatusOr<int> per_sm =
      ResidentBlocksPerSm(kernel, facts->device, kMaxSmemBytes, cached_per_sm);
  if (!per_sm.ok()) return per_sm.status();
  const int64_t resident = std::max<int64_t>(1, int64_t{*per_sm} * facts->sms);
  const int64_t row_blocks = (b.n + kRowTiles * 16 - 1) / (kRowTiles * 16);
  // Blocks split K in whole block chunks (every warp's chunk side by side).
  const int64_t block_chunk = int64_t{kWarps} * L::kChunk;
  const int64_t chunks = (b.k + block_chunk - 1) / block_chunk;
  int64_t k_splits = k_splits_override > 0 ? k_splits_override : resident / row_blocks;
  k_splits = std::clamp<int64_t>(k_splits, 1, chunks);
  const int64_t k_per_block = (chunks + k_splits - 1) / k_splits * block_chunk;
  k_splits = (b.k + k_per_block - 1) / k_per_block;
  if (k_splits > 1) RETURN_IF_CUDA_ERROR(cudaMemsetAsync(c, 0, m * b.n * sizeof(float), stream));
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(k_splits));
  kernel<<<grid, kWarps * 32, smem_bytes, stream>>>(
      a.hi, a.lo, a.row_scale, static_cast<int>(m), static_cast<const uint8_t*>(b.data),
      static_cast<const uint8_t*>(b.scales), b.tensor_scale, b.n, static_cast<int>(b.k),
      static_cast<int>(k_per_block), c);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// M <= 8: the ring when the operands allow it (FP16 A, aligned, `ring_operands`: NVFP4
// K % 64 with 4-byte aligned scales) and it fits the device, tuning.stages deep
// (gemm-bench's sweep) or 3 (measured faster than 2, docs/KERNELS.md), shallower where
// shared memory is smaller (3 stages of 8 A rows take 111 KiB: sm_86/89 allow 99);
// otherwise the register path.
template <QuantFormat kFormat, bool kSplit, bool kAligned>
absl::Status LaunchRing(const ActivationPlanes& a, int64_t m, bool ring_operands,
                        const DeviceQuantizedWeight& b, float* c,
                        const SkinnyQuantizedTuning& tuning, cudaStream_t stream) {
  const int ks = tuning.k_splits;
  if constexpr (kAligned && !kSplit) {
    if (ring_operands) {
      // (227 KiB per block on sm_90, 163 on sm_80, 99 on sm_86/89/120.)
      const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
      if (!facts.ok()) return facts.status();
      // Each depth's largest need (8 A rows), as the launcher raises the limit to it.
      auto fits = [&](size_t bytes) { return bytes <= static_cast<size_t>(facts->smem_optin); };
      constexpr size_t kNeed2 = SkinnySmemBytes<kFormat, 2, 1, kSplit, 2, kAligned>(8);
      constexpr size_t kNeed3 = SkinnySmemBytes<kFormat, 2, 1, kSplit, 3, kAligned>(8);
      constexpr size_t kNeed4 = SkinnySmemBytes<kFormat, 2, 1, kSplit, 4, kAligned>(8);
      const int wanted = tuning.stages == 2 || tuning.stages == 4 ? tuning.stages : 3;
      if (wanted >= 4 && fits(kNeed4)) {
        return LaunchVariant<kFormat, 2, 1, kSplit, kAligned, 4, 2>(a, m, b, c, ks, stream);
      }
      if (wanted >= 3 && fits(kNeed3)) {
        return LaunchVariant<kFormat, 2, 1, kSplit, kAligned, 3, 2>(a, m, b, c, ks, stream);
      }
      if (fits(kNeed2)) {
        return LaunchVariant<kFormat, 2, 1, kSplit, kAligned, 2, 2>(a, m, b, c, ks, stream);
      }
    }
  }
  return LaunchVariant<kFormat, 2, 1, kSplit, kAligned, kRegisterPath, 2>(a, m, b, c, ks,
                                                                          stream);
}

// A tiles of 8 rows: 1, 2, 4 or 8 (M up to 64). Two weight-row tiles per warp while the
// accumulators allow it (every A fragment then feeds twice as many MMAs), one where A
// rows need the registers.
template <QuantFormat kFormat, bool kSplit, bool kAligned>
absl::Status LaunchForM(const ActivationPlanes& a, int64_t m, bool ring_operands,
                        const DeviceQuantizedWeight& b, float* c,
                        const SkinnyQuantizedTuning& tuning, cudaStream_t stream) {
  constexpr int kReg = kRegisterPath;
  const int ks = tuning.k_splits;
  if (m <= 8) {
    return LaunchRing<kFormat, kSplit, kAligned>(a, m, ring_operands, b, c, tuning, stream);
  }
  if (m <= 16) {
    return LaunchVariant<kFormat, 2, 2, kSplit, kAligned, kReg, 2>(a, m, b, c, ks, stream);
  }
  if (m <= 32) {
    return LaunchVariant<kFormat, 1, 4, kSplit, kAligned, kReg, 2>(a, m, b, c, ks, stream);
  }
  return LaunchVariant<kFormat, 1, 8, kSplit, kAligned, kReg, 2>(a, m, b, c, ks, stream);
}

template <QuantFormat kFormat>
absl::Status LaunchForFormat(const ActivationPlanes& a, bool split, bool aligned,
                             bool ring_operands, int64_t m, const DeviceQuantizedWeight& b,
                             float* c, const SkinnyQuantizedTuning& tuning, cudaStream_t stream) {
  const bool r = ring_operands;
  if (split) {
    return aligned ? LaunchForM<kFormat, true, true>(a, m, r, b, c, tuning, stream)
                   : LaunchForM<kFormat, true, false>(a, m, r, b, c, tuning, stream);
  }
  return aligned ? LaunchForM<kFormat, false, true>(a, m, r, b, c, tuning, stream)
                 : LaunchForM<kFormat, false, false>(a, m, r, b, c, tuning, stream);
}

// The operand conditions of the ring (SkinnyRingRuns).
bool RingOperands(const void* a, const DeviceQuantizedWeight& b) {
  if (!Aligned16(a) || !Aligned16(b.data) || reinterpret_cast<uintptr_t>(b.scales) % 2 != 0) {
    return false;
  }
  if (b.format == QuantFormat::kNvfp4) {
    return b.k % 64 == 0 && reinterpret_cast<uintptr_t>(b.scales) % 4 == 0;
  }
  return b.k % 16 == 0;
}

}  // namespace

size_t SkinnyQuantizedWorkspaceBytes(DataType a_type, int64_t m, int64_t k) {
  // FP16 A is read in place; FP32 and BF16 A become FP16 hi and lo planes and a scale per
  // row first (SplitARows).
  if (a_type != DataType::kFloat32 && a_type != DataType::kBFloat16) return 0;
  return static_cast<size_t>(2 * RoundUp(m * k * 2, 256) + RoundUp(m * 4, 256));
}

absl::Status CheckSkinnyOperands(DataType a_type, int64_t m, const DeviceQuantizedWeight& b) {
  if (m < 1 || m > kSkinnyQuantizedMaxM) {
    return absl::InvalidArgumentError(absl::StrCat("skinny quantized GEMM takes M in [1, ",
                                                   kSkinnyQuantizedMaxM, "]; got ", m));
  }
  if (a_type != DataType::kFloat16 && a_type != DataType::kFloat32 &&
      a_type != DataType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat("skinny quantized GEMM takes FLOAT16, "
                                                   "FLOAT32 or BFLOAT16 activations, not ",
                                                   DataTypeName(a_type)));
  }
  if (b.n < 1 || b.k < 1 || b.k > (int64_t{1} << 30) ||
      (b.format == QuantFormat::kNvfp4 && b.k % 16 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("bad quantized weight [", b.n, ", ", b.k,
                                                   "] (K in [1, 2^30]; NVFP4 needs K % 16 == 0)"));
  }
  return absl::OkStatus();
}

absl::Status SkinnyRingRuns(const void* a, DataType a_type, int64_t m,
                            const DeviceQuantizedWeight& b, int64_t smem_optin_bytes) {
  if (a_type != DataType::kFloat16 || m > 8) {
    return absl::FailedPreconditionError("the skinny ring takes FLOAT16 activations of 1-8 rows");
  }
  // 16-byte loads and copies need every weight row, every lane segment and A's rows
  // 16-byte aligned (NVFP4 rows of K/2 bytes, a segment of 32 values; INT8 rows of K
  // bytes, 16 values; A rows of 2K bytes read 8 halves at a time); the ring also copies
  // NVFP4 scales 4 bytes at a time: rows of K/16 scale bytes 4-byte aligned (K % 64).
  const bool nvfp4 = b.format == QuantFormat::kNvfp4;
  if (!RingOperands(a, b)) {
    return absl::FailedPreconditionError(
        nvfp4 ? "the skinny ring takes NVFP4 K % 64 == 0 with 16-byte aligned codes and A, "
                "4-byte aligned scales"
              : "the skinny ring takes INT8 K % 16 == 0 with 16-byte aligned codes and A");
  }
  const auto need = static_cast<int64_t>(
      nvfp4 ? SkinnySmemBytes<QuantFormat::kNvfp4, 2, 1, false, 2, true>(8)
            : SkinnySmemBytes<QuantFormat::kInt8, 2, 1, false, 2, true>(8));
  if (need > smem_optin_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("the skinny ring needs ", need,
                     " bytes of shared memory per block; the device allows ", smem_optin_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<SkinnyPath> ChooseSkinnyPath(const void* a, DataType a_type, int64_t m,
                                            const DeviceQuantizedWeight& b) {
  const bool one_plane = a_type == DataType::kFloat16 || a_type == DataType::kBFloat16;
  if (one_plane && m > 8 && SkinnyStreamRuns(a, m, b)) {
    const absl::Status fits = SkinnyStreamFits(m, b, /*fill_required=*/true);
    if (fits.ok()) return SkinnyPath::kStream;
    if (fits.code() != absl::StatusCode::kFailedPrecondition) return fits;
  }
  const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
  if (!facts.ok()) return facts.status();
  if (SkinnyRingRuns(a, a_type, m, b, facts->smem_optin).ok()) return SkinnyPath::kRing;
  return SkinnyPath::kRegisters;
}

absl::Status LaunchSkinnyQuantizedGemm(const void* a, DataType a_type, int64_t m,
                                       const DeviceQuantizedWeight& b, float* c,
                                       void* workspace, size_t workspace_bytes,
                                       cudaStream_t stream, const SkinnyQuantizedTuning& tuning) {
  if (absl::Status s = CheckSkinnyOperands(a_type, m, b); !s.ok()) return s;
  const bool split = a_type != DataType::kFloat16;
  if (a == nullptr || c == nullptr || b.data == nullptr || b.scales == nullptr ||
      (split && workspace == nullptr)) {
    return absl::InvalidArgumentError("skinny quantized GEMM: null pointer");
  }
  if (workspace_bytes < SkinnyQuantizedWorkspaceBytes(a_type, m, b.k)) {
    return absl::InvalidArgumentError("skinny quantized GEMM: workspace too small");
  }
  ActivationPlanes planes{static_cast<const __half*>(a), nullptr, nullptr};
  if (split) {
    auto* h = static_cast<__half*>(workspace);
    auto* l = h + RoundUp(m * b.k * 2, 256) / 2;
    auto* row_scale = reinterpret_cast<float*>(l + RoundUp(m * b.k * 2, 256) / 2);
    const int k = static_cast<int>(b.k);
    if (a_type == DataType::kFloat32) {
      SplitARows<<<static_cast<unsigned>(m), 256, 0, stream>>>(static_cast<const float*>(a), k,
                                                               h, l, row_scale);
    } else {
      SplitARows<<<static_cast<unsigned>(m), 256, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(a), k, h, l, row_scale);
    }
    RETURN_IF_CUDA_ERROR(cudaGetLastError());
    planes = {h, l, row_scale};
  }
  const __half* hi = planes.hi;
  const __half* lo = planes.lo;
  const bool aligned = Aligned16(b.data) && Aligned16(hi) && (lo == nullptr || Aligned16(lo)) &&
                       (b.format == QuantFormat::kNvfp4 ? b.k % 32 == 0 : b.k % 16 == 0) &&
                       reinterpret_cast<uintptr_t>(b.scales) % 2 == 0;
  SkinnyPath path = tuning.path;
  if (path == SkinnyPath::kAuto) {
    const absl::StatusOr<SkinnyPath> chosen = ChooseSkinnyPath(hi, a_type, m, b);
    if (!chosen.ok()) return chosen.status();
    path = *chosen;
  }
  // BF16 A goes to the streaming path as its hi plane and row scales: BF16's 8
  // significant bits fit FP16's 11, so hi = fp16(a * 2^e) is exact down to FP16's
  // subnormals, where it is a multiple of 2^-24 within 2^-25 of a * 2^e, and lo =
  // fp16(a * 2^e - hi) is then 0 (round to even at 2^-25): the lo plane of BF16 is always
  // zero. FP32 A needs both planes.
  if (path == SkinnyPath::kStream) {
    if (a_type == DataType::kFloat32) {
      return absl::FailedPreconditionError(
          "the streaming skinny kernel takes FLOAT16 or BFLOAT16 activations");
    }
    return LaunchSkinnyStream(hi, planes.row_scale, m, b, c, tuning.k_splits,
                              /*fill_required=*/false, stream);
  }
  if (tuning.path == SkinnyPath::kRing) {  // forced: say why it cannot run
    const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
    if (!facts.ok()) return facts.status();
    if (absl::Status s = SkinnyRingRuns(hi, a_type, m, b, facts->smem_optin); !s.ok()) return s;
  }
  // kRing and kClassic take the ring where its operands allow (LaunchRing also checks
  // the variant fits the device); kRegisters never does.
  const bool ring = path != SkinnyPath::kRegisters && RingOperands(hi, b);
  if (b.format == QuantFormat::kNvfp4) {
    return LaunchForFormat<QuantFormat::kNvfp4>(planes, split, aligned, ring, m, b, c, tuning,
                                                stream);
  }
  return LaunchForFormat<QuantFormat::kInt8>(planes, split, aligned, ring, m, b, c, tuning,
                                             stream);
}

}  // namespace gemmd::gpu
