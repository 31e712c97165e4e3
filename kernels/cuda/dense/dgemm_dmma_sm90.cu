// FP64 GEMM on Hopper's FP64 tensor cores through the sm_90 DMMA shape `mma.sync.m16n8k8`
// with f64 operands: a quarter of m8n8k4's instructions for the same products (m16n8k16
// takes an eighth, but twice the fragment registers; it measured slower, docs/KERNELS.md).
//
// Each warp computes a 64 x 32 tile of C as 4 x 4 tiles of 16 x 8: 64 FP64 accumulators a
// thread. A block is 2 x 2 warps, a 128 x 64 tile: two blocks an SM at ~250 registers,
// each with its own barriers (cuBLAS's DGEMM on sm_90 has this shape). Shared tiles follow
// the stored operand's contiguous dimension, so that 16-byte cp.async fill them: an
// operand contiguous along K ([M,K] A, [N,K] B) is kept row by row with K + 4 doubles a
// row, one contiguous along M or N ([K,M] A, [K,N] B) k row by k row with 128 + 8 (64 + 8);
// the paddings put a fragment's 32 loads (8 rows x 4 k) in the two wavefronts 256 bytes
// need. Operands whose rows or items are not 16-byte aligned go through the same kernels
// with 8-byte copies. C = alpha * acc + beta * C_in in FP64, bounds-checked; no K split,
// so a planned row block gets its product's bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common/alignment.h"
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/dense/dgemm_dmma.h"
#include "kernels/cuda/dense/dmma_m16n8k8.cuh"
#include "kernels/cuda/dense/tile_order.h"

namespace gemmd::gpu::internal {
namespace {

constexpr int kBM = kDgemmTileM;
constexpr int kWM = 64, kWN = 32;                     // a warp's tile
constexpr int kTilesM = kWM / 16, kTilesN = kWN / 8;  // 4 x 4 DMMA tiles a warp
constexpr int kMaxGridZ = 65535;

// A variant: its tile's N (64: 4 warps, two blocks an SM), a stage's K depth and count,
// and how it loads and reads its tiles.
template <int kBNArg, int kBKArg, int kStagesArg, bool kInsideArg, int kGroupMArg = 1,
          bool kFragPipeArg = false, bool kSplitArg = false, bool kUniformCopyArg = false,
          bool kInterleaveArg = false>
struct Shape {
  static constexpr int kBN = kBNArg, kBK = kBKArg, kStages = kStagesArg, kMmaK = 8;
  // kInside: blocks inside M and N load without bounds checks. kGroupM: tiles taken in
  // groups of kGroupM tile rows, down each column of the group, so that the blocks resident
  // together read fewer distinct rows of A and columns of B (1: row by row).
  static constexpr bool kInside = kInsideArg;
  static constexpr int kGroupM = kGroupMArg;
  // kFragPipe: fragments read a unit ahead into two register sets (the main loop's comment).
  static constexpr bool kFragPipe = kFragPipeArg;
  // kSplit: the tiles inside M and N and the edge tiles go to two launches, so the inside
  // blocks' kernel has no checked copies but a partial last K tile's (LoadTileKTail), and
  // its registers are its own.
  static constexpr bool kSplit = kSplitArg;
  // kUniformCopy: the inside copies address from the thread's fixed first-copy pointer plus
  // an offset the whole block shares (LoadTileUniform).
  static constexpr bool kUniformCopy = kUniformCopyArg;
  // kInterleave: the full tiles' kernel spreads a stage's copies over the DMMA units of the
  // stage before it (a few copies a unit) instead of issuing them together after the
  // barrier, and a partial last K tile is taken first, in the prologue, so that every
  // copy of the main loop is a full tile's. The edge kernel takes the K tiles in the same
  // order, so both give a row the same bits.
  static constexpr bool kInterleave = kInterleaveArg;
  static_assert(!kInterleave || (kSplit && kUniformCopy), "interleaved copies are uniform ones");
  static constexpr int kWarpsN = kBN / kWN;
  static constexpr int kThreads = (kBM / kWM) * kWarpsN * 32;
  static constexpr int kMinBlocks = kThreads == 128 ? 2 : 1;
  static constexpr int kLdRow = kBK + 4;  // a tile kept row by row (K contiguous)
  static constexpr int kLdKA = kBM + 8;   // A kept k row by k row
  static constexpr int kLdKB = kBN + 8;   // B kept k row by k row
  static constexpr int kATile = std::max(kBM * kLdRow, kBK* kLdKA);
  static constexpr int kBTile = std::max(kBN * kLdRow, kBK* kLdKB);
  static constexpr int kStageDoubles = kATile + kBTile;
  static constexpr int kSmemBytes = kStages * kStageDoubles * static_cast<int>(sizeof(double));
  static_assert(kBK % kMmaK == 0, "whole m16n8k8 steps a stage");
};

// A kRows x kCols tile of a row-major matrix (leading dimension ld) from (row0, col0) into
// shared memory, element (r, c) at s[r * kLds + c]; elements past (row_lim, col_lim) read
// as zeros. kChunk doubles a copy (2: 16 bytes, the rows 16-byte aligned; 1: 8 bytes).
template <int kThreads, int kRows, int kCols, int kLds, int kChunk>
__device__ __forceinline__ void LoadTile(const double* g, int64_t ld, int row0, int col0,
                                         int row_lim, int col_lim, double* s, int tid) {
  constexpr int kPerRow = kCols / kChunk;
  static_assert((kRows * kPerRow) % kThreads == 0, "whole copies a thread");
#pragma unroll
  for (int i = 0; i < kRows * kPerRow / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kPerRow, c = (idx % kPerRow) * kChunk;
    const int gr = row0 + r, gc = col0 + c;
    const int valid = gr < row_lim ? max(0, min(kChunk, col_lim - gc)) : 0;
    const double* src = valid > 0 ? g + static_cast<int64_t>(gr) * ld + gc : g;
    if constexpr (kChunk == 2) {
      CpAsync16(s + r * kLds + c, src, valid * 8);
    } else {
      CpAsync8(s + r * kLds + c, src, valid * 8);
    }
  }
}

// The same tile with every copy inside the matrix: no bounds checks. `g` points at the copy
// thread `tid` makes first (row tid / (kCols / kChunk), its column), `row_step` is the
// stride between its copies' rows (kThreads / (kCols / kChunk) rows).
template <int kThreads, int kRows, int kCols, int kLds, int kChunk>
__device__ __forceinline__ void LoadTileInside(const double* g, int64_t row_step, double* s,
                                               int tid) {
  constexpr int kPerRow = kCols / kChunk, kRowStep = kThreads / kPerRow;
  static_assert(kThreads % kPerRow == 0 && kRows % kRowStep == 0, "whole rows a pass");
  s += (tid / kPerRow) * kLds + (tid % kPerRow) * kChunk;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    if constexpr (kChunk == 2) {
      CpAsync16(s + i * kRowStep * kLds, g, 16);
    } else {
      CpAsync8(s + i * kRowStep * kLds, g, 8);
    }
    g += row_step;
  }
}

// The same copies, each from the thread's fixed first-copy pointer `g` plus an offset every
// thread of the block shares (the K tile's `offset`, plus its rows' steps): that sum can live
// in uniform registers, and no copy's address register is overwritten while the copy may
// still read it. LoadTilePiece issues the share of them that falls to DMMA unit `unit` when
// a stage's kTotal copies (this tile's are numbers kFirst on) are spread evenly over kUnits
// units; `unit` is a constant once the caller's loops are unrolled, so each unit keeps only
// its own copies. LoadTileUniform issues them all.
template <int kThreads, int kRows, int kCols, int kLds, int kChunk, int kFirst, int kTotal,
          int kUnits>
__device__ __forceinline__ void LoadTilePiece(const double* g, int64_t offset, int64_t row_step,
                                              double* s, int tid, int unit) {
  constexpr int kPerRow = kCols / kChunk, kRowStep = kThreads / kPerRow;
  static_assert(kThreads % kPerRow == 0 && kRows % kRowStep == 0, "whole rows a pass");
  s += (tid / kPerRow) * kLds + (tid % kPerRow) * kChunk;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    if ((kFirst + i) * kUnits / kTotal != unit) continue;
    // The empty asm keeps the compiler from folding the sum into a chain of per-thread
    // pointers (each copy's address made from the last one's, as LoadTileInside's are).
    int64_t at = offset + i * row_step;
    asm("" : "+l"(at));
    if constexpr (kChunk == 2) {
      CpAsync16(s + i * kRowStep * kLds, g + at, 16);
    } else {
      CpAsync8(s + i * kRowStep * kLds, g + at, 8);
    }
  }
}

template <int kThreads, int kRows, int kCols, int kLds, int kChunk>
__device__ __forceinline__ void LoadTileUniform(const double* g, int64_t offset, int64_t row_step,
                                                double* s, int tid) {
  constexpr int kCopies = kRows / (kThreads / (kCols / kChunk));
  LoadTilePiece<kThreads, kRows, kCols, kLds, kChunk, 0, kCopies, 1>(g, offset, row_step, s, tid,
                                                                     0);
}

// The copies of LoadTileInside for a tile inside M and N whose K runs past the matrix: only
// K is checked, `k_left` elements of it from the tile's first (fewer than the tile's).
// kKAlongCols: the tile's columns are K (an operand stored K-contiguous), else its rows.
// Copies reading nothing name `base` (any valid address).
template <int kThreads, int kRows, int kCols, int kLds, int kChunk, bool kKAlongCols>
__device__ __forceinline__ void LoadTileKTail(const double* base, const double* g, int64_t row_step,
                                              int k_left, double* s, int tid) {
  constexpr int kPerRow = kCols / kChunk, kRowStep = kThreads / kPerRow;
  static_assert(kThreads % kPerRow == 0 && kRows % kRowStep == 0, "whole rows a pass");
  const int r0 = tid / kPerRow, c0 = (tid % kPerRow) * kChunk;
  s += r0 * kLds + c0;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const int valid =
        kKAlongCols ? max(0, min(kChunk, k_left - c0)) : (r0 + i * kRowStep < k_left ? kChunk : 0);
    const double* src = valid > 0 ? g + i * row_step : base;
    if constexpr (kChunk == 2) {
      CpAsync16(s + i * kRowStep * kLds, src, valid * 8);
    } else {
      CpAsync8(s + i * kRowStep * kLds, src, valid * 8);
    }
  }
}

// Where a thread's first copy of a kRows x kCols tile at (row0, col0) reads, and the stride
// between its copies (LoadTileInside).
template <int kThreads, int kCols, int kChunk>
__device__ __forceinline__ const double* FirstCopy(const double* g, int64_t ld, int row0, int col0,
                                                   int tid, int64_t* row_step) {
  constexpr int kPerRow = kCols / kChunk;
  *row_step = (kThreads / kPerRow) * ld;
  return g + static_cast<int64_t>(row0 + tid / kPerRow) * ld + col0 + (tid % kPerRow) * kChunk;
}

// kEdge: with D::kSplit, the launch of the edge tiles (EdgeTile); else of the full ones.
template <class D, bool kTransA, bool kTransB, int kChunk, bool kEdge>
__global__ void __launch_bounds__(D::kThreads, D::kMinBlocks)
    DgemmDmmaSm90Kernel(DgemmArgs p, int item0) {
  constexpr int kBN = D::kBN, kBK = D::kBK, kStages = D::kStages, kMmaK = D::kMmaK;
  constexpr int kThreads = D::kThreads, kWarpsN = D::kWarpsN, kLdRow = D::kLdRow;
  constexpr int kLdKA = D::kLdKA, kLdKB = D::kLdKB, kStageDoubles = D::kStageDoubles;
  extern __shared__ double smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int item = item0 + static_cast<int>(blockIdx.z);
  TileCoord tile{static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x)};
  if constexpr (D::kSplit && kEdge) {
    tile = EdgeTile(static_cast<int>(blockIdx.x), (p.m + kBM - 1) / kBM, (p.n + kBN - 1) / kBN,
                    p.m / kBM, p.n / kBN);
  } else if constexpr (D::kGroupM > 1) {
    const int tiles_n = static_cast<int>(gridDim.x);
    tile = GroupedTile(tile.m * tiles_n + tile.n, static_cast<int>(gridDim.y), tiles_n, D::kGroupM);
  }
  const int m0 = tile.m * kBM;
  const int n0 = tile.n * kBN;
  const double* a = p.a + item * p.stride_a;
  const double* b = p.b + item * p.stride_b;

  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / kWarpsN) * kWM, wn = (warp % kWarpsN) * kWN;
  const int g = lane >> 2, t = lane & 3;
  double acc[kTilesM][kTilesN][4];
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
    for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
    }
  }

  const int ktiles = (p.k + kBK - 1) / kBK;
  // A block whose tile lies inside M and N loads its whole K tiles without bounds checks,
  // from pointers that advance a K tile at a time; the rest (edge blocks, a partial last
  // K tile) go through the checked loads. With kSplit the launch decides: every block of
  // the full tiles' launch is inside (its partial last K tile checked in K alone), no
  // block of the edge launch.
  int inside_ktiles = D::kInside && m0 + kBM <= p.m && n0 + kBN <= p.n ? p.k / kBK : 0;
  if constexpr (D::kSplit) inside_ktiles = kEdge ? 0 : p.k / kBK;
  int64_t a_step, b_step;
  const double* a_first = kTransA ? FirstCopy<kThreads, kBM, kChunk>(a, p.lda, 0, m0, tid, &a_step)
                                  : FirstCopy<kThreads, kBK, kChunk>(a, p.lda, m0, 0, tid, &a_step);
  const double* b_first = kTransB ? FirstCopy<kThreads, kBK, kChunk>(b, p.ldb, n0, 0, tid, &b_step)
                                  : FirstCopy<kThreads, kBN, kChunk>(b, p.ldb, 0, n0, tid, &b_step);
  // The stage tiles as stored: A [kBM, kBK] row by row, or k row by k row when transposed
  // ([K,M] in memory); B [kBK, kBN] k row by k row, or row by row when transposed.
  constexpr int kARows = kTransA ? kBK : kBM, kACols = kTransA ? kBM : kBK;
  constexpr int kALds = kTransA ? kLdKA : kLdRow;
  constexpr int kBRows = kTransB ? kBN : kBK, kBCols = kTransB ? kBK : kBN;
  constexpr int kBLds = kTransB ? kLdRow : kLdKB;
  const int64_t a_ktile = kTransA ? kBK * p.lda : kBK;  // one K tile further on
  const int64_t b_ktile = kTransB ? kBK : kBK * p.ldb;
  // The K tile taken in turn `s`: in order, or with kInterleave a partial last one first.
  const bool tail_first = D::kInterleave && p.k % kBK != 0;
  auto ktile_of = [&](int s) { return tail_first ? (s == 0 ? ktiles - 1 : s - 1) : s; };
  // Blocks with every K tile inside run a main loop with no checked loads at all: their
  // registers are not shared with the checked loads' temporaries.
  auto main_loop = [&](auto all_inside) {
    constexpr bool kAllInside = decltype(all_inside)::value;
    constexpr bool kInterleave = D::kInterleave && kAllInside;
    // The copies of turn `s` (K tile ktile_of(s)) into its stage buffer, all at once.
    auto load = [&](int s) {
      double* as = smem + (s % kStages) * kStageDoubles;
      double* bs = as + D::kATile;
      const int kt = ktile_of(s);
      if (kAllInside && D::kSplit && kt == inside_ktiles) {  // the partial last K tile
        const int k_left = p.k - kt * kBK;
        LoadTileKTail<kThreads, kARows, kACols, kALds, kChunk, !kTransA>(a, a_first + kt * a_ktile,
                                                                         a_step, k_left, as, tid);
        LoadTileKTail<kThreads, kBRows, kBCols, kBLds, kChunk, kTransB>(b, b_first + kt * b_ktile,
                                                                        b_step, k_left, bs, tid);
        return;
      }
      if (D::kUniformCopy && kAllInside) {
        LoadTileUniform<kThreads, kARows, kACols, kALds, kChunk>(a_first, kt * a_ktile, a_step, as,
                                                                 tid);
        LoadTileUniform<kThreads, kBRows, kBCols, kBLds, kChunk>(b_first, kt * b_ktile, b_step, bs,
                                                                 tid);
        return;
      }
      if (kAllInside || kt < inside_ktiles) {
        LoadTileInside<kThreads, kARows, kACols, kALds, kChunk>(a_first + kt * a_ktile, a_step, as,
                                                                tid);
        LoadTileInside<kThreads, kBRows, kBCols, kBLds, kChunk>(b_first + kt * b_ktile, b_step, bs,
                                                                tid);
        return;
      }
      if constexpr (!kAllInside) {
        const int k0 = kt * kBK;
        if (kTransA) {
          LoadTile<kThreads, kBK, kBM, kLdKA, kChunk>(a, p.lda, k0, m0, p.k, p.m, as, tid);
        } else {
          LoadTile<kThreads, kBM, kBK, kLdRow, kChunk>(a, p.lda, m0, k0, p.m, p.k, as, tid);
        }
        if (kTransB) {
          LoadTile<kThreads, kBN, kBK, kLdRow, kChunk>(b, p.ldb, n0, k0, p.n, p.k, bs, tid);
        } else {
          LoadTile<kThreads, kBK, kBN, kLdKB, kChunk>(b, p.ldb, k0, n0, p.k, p.n, bs, tid);
        }
      }
    };
    // kInterleave: the copies of turn `s` (a full K tile) that fall to DMMA unit `unit`.
    constexpr int kSteps = kBK / kMmaK, kUnits = kSteps * kTilesM;
    constexpr int kACopies = kARows / (kThreads / (kACols / kChunk));
    constexpr int kBCopies = kBRows / (kThreads / (kBCols / kChunk));
    auto load_piece = [&](int s, int unit) {
      double* as = smem + (s % kStages) * kStageDoubles;
      double* bs = as + D::kATile;
      const int kt = ktile_of(s);
      LoadTilePiece<kThreads, kARows, kACols, kALds, kChunk, 0, kACopies + kBCopies, kUnits>(
          a_first, kt * a_ktile, a_step, as, tid, unit);
      LoadTilePiece<kThreads, kBRows, kBCols, kBLds, kChunk, kACopies, kACopies + kBCopies, kUnits>(
          b_first, kt * b_ktile, b_step, bs, tid, unit);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < ktiles) load(s);
      CpAsyncCommit();
    }
    // Fragments (PTX ISA, m16n8k8 .f64): a_i = A[g + 8 (i % 2)][t + 4 (i / 2)],
    // b_i = B[t + 4 i][g], C pairs at rows g and g + 8, columns 2t and 2t + 1. Element (m, k)
    // of a stage's A tile and (k, n) of its B tile in their shared layouts:
    auto a_at = [&](const double* as, int m, int k) {
      return kTransA ? as[k * kLdKA + m] : as[m * kLdRow + k];
    };
    auto b_at = [&](const double* bs, int k, int n) {
      return kTransB ? bs[n * kLdRow + k] : bs[k * kLdKB + n];
    };
    if constexpr (D::kFragPipe) {
      // The DMMAs of a stage in units of one A fragment (a 16-row tile) against the step's
      // B fragments; each unit's A (and, starting a step, its B) is read into the other of
      // two register sets while the unit before runs. The barrier that hands over the next
      // stage comes before the last unit's DMMAs, so they cover its wait and the next
      // stage's first reads.
      static_assert(kUnits % 2 == 0 && kSteps % 2 == 0, "register sets alternate within a stage");
      double af[2][kMmaK / 2], bf[2][kTilesN][kMmaK / 4];
      auto read_b = [&](int set, const double* as, int ks) {
        const double* bs = as + D::kATile;
#pragma unroll
        for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
          for (int i = 0; i < kMmaK / 4; ++i)
            bf[set][j][i] = b_at(bs, ks + t + 4 * i, wn + j * 8 + g);
        }
      };
      auto read_a = [&](int set, const double* as, int ks, int mi) {
#pragma unroll
        for (int i = 0; i < kMmaK / 2; ++i) {
          af[set][i] = a_at(as, wm + mi * 16 + g + 8 * (i % 2), ks + t + 4 * (i / 2));
        }
      };
      CpAsyncWait<kStages - 2>();
      __syncthreads();  // stage 0 landed everywhere
      if constexpr (!kInterleave) {
        if (kStages - 1 < ktiles) load(kStages - 1);
        CpAsyncCommit();
      }
      read_b(0, smem, 0);
      read_a(0, smem, 0, 0);
      int stage = 0;  // the stage being read
      for (int kt = 0; kt < ktiles; ++kt) {
        const double* as = smem + stage * kStageDoubles;
        // kInterleave: turn kt + kStages - 1 goes into the buffer stage kt - 1 freed, a few
        // copies a unit, one group a stage.
        const bool fills = kt + kStages - 1 < ktiles;
#pragma unroll
        for (int u = 0; u < kUnits; ++u) {
          const int step = u / kTilesM, mi = u % kTilesM;
          if constexpr (kInterleave) {
            if (fills) load_piece(kt + kStages - 1, u);
            if (u + 1 == kUnits) CpAsyncCommit();
          }
          if (u + 1 < kUnits) {
            const int next_step = (u + 1) / kTilesM, next_mi = (u + 1) % kTilesM;
            if (next_mi == 0) read_b(next_step % 2, as, next_step * kMmaK);
            read_a((u + 1) % 2, as, next_step * kMmaK, next_mi);
          } else if (kt + 1 < ktiles) {
            CpAsyncWait<kStages - 2>();
            __syncthreads();  // stage kt + 1 landed everywhere; stage kt's reads are issued
            if constexpr (!kInterleave) {
              if (kt + kStages < ktiles) load(kt + kStages);  // into stage kt's buffer
              CpAsyncCommit();
            }
            stage = stage + 1 == kStages ? 0 : stage + 1;
            read_b(0, smem + stage * kStageDoubles, 0);
            read_a(0, smem + stage * kStageDoubles, 0, 0);
          }
#pragma unroll
          for (int j = 0; j < kTilesN; ++j) Dmma(acc[mi][j], af[u % 2], bf[step % 2][j]);
        }
      }
    } else {
      for (int kt = 0; kt < ktiles; ++kt) {
        CpAsyncWait<kStages - 2>();
        __syncthreads();  // stage kt landed everywhere; the stage reloaded next is free
        const bool fills = kt + kStages - 1 < ktiles;
        if constexpr (!kInterleave) {
          if (fills) load(kt + kStages - 1);
          CpAsyncCommit();
        }
        const double* as = smem + (kt % kStages) * kStageDoubles;
        const double* bs = as + D::kATile;
#pragma unroll
        for (int ks = 0; ks < kBK; ks += kMmaK) {
          // Fragments (PTX ISA, m16n8k8 .f64): a_i = A[g + 8 (i % 2)][t + 4 (i / 2)],
          // b_i = B[t + 4 i][g], C pairs at rows g and g + 8, columns 2t and 2t + 1.
          double bf[kTilesN][kMmaK / 4];
#pragma unroll
          for (int j = 0; j < kTilesN; ++j) {
#pragma unroll
            for (int i = 0; i < kMmaK / 4; ++i) bf[j][i] = b_at(bs, ks + t + 4 * i, wn + j * 8 + g);
          }
#pragma unroll
          for (int mi = 0; mi < kTilesM; ++mi) {
            if constexpr (kInterleave) {
              if (fills) load_piece(kt + kStages - 1, ks / kMmaK * kTilesM + mi);
            }
            double af[kMmaK / 2];
#pragma unroll
            for (int i = 0; i < kMmaK / 2; ++i) {
              af[i] = a_at(as, wm + mi * 16 + g + 8 * (i % 2), ks + t + 4 * (i / 2));
            }
#pragma unroll
            for (int j = 0; j < kTilesN; ++j) Dmma(acc[mi][j], af, bf[j]);
          }
        }
        if constexpr (kInterleave) CpAsyncCommit();
      }
    }
  };
  if constexpr (D::kSplit) {
    main_loop(std::bool_constant<!kEdge>{});
  } else if (D::kInside && inside_ktiles == ktiles) {
    main_loop(std::true_type{});
  } else {
    main_loop(std::false_type{});
  }

  StoreDmmaTiles(p, item, m0 + wm, n0 + wn, g, t, acc);
}

template <class D, bool kTransA, bool kTransB, int kChunk, bool kEdge>
absl::Status LaunchGrid(const DgemmArgs& p, dim3 grid, int item0, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_set{0};
  constexpr auto* kKernel = &DgemmDmmaSm90Kernel<D, kTransA, kTransB, kChunk, kEdge>;
  GEMMD_GPU_RETURN_IF_ERROR(
      EnsureDynamicSmem(reinterpret_cast<const void*>(kKernel), D::kSmemBytes, &smem_set));
  kKernel<<<grid, D::kThreads, D::kSmemBytes, stream>>>(p, item0);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <class D, bool kTransA, bool kTransB, int kChunk>
absl::Status LaunchLayout(const DgemmArgs& p, int batch, cudaStream_t stream) {
  const int tiles_m = (p.m + kBM - 1) / kBM, tiles_n = (p.n + D::kBN - 1) / D::kBN;
  const int full_m = p.m / kBM, full_n = p.n / D::kBN;
  const int edges = tiles_m * tiles_n - full_m * full_n;
  for (int item0 = 0; item0 < batch; item0 += kMaxGridZ) {
    const int items = std::min(kMaxGridZ, batch - item0);
    if constexpr (!D::kSplit) {
      GEMMD_GPU_RETURN_IF_ERROR((LaunchGrid<D, kTransA, kTransB, kChunk, false>(
          p, dim3(tiles_n, tiles_m, items), item0, stream)));
    } else {
      if (full_m > 0 && full_n > 0) {
        GEMMD_GPU_RETURN_IF_ERROR((LaunchGrid<D, kTransA, kTransB, kChunk, false>(
            p, dim3(full_n, full_m, items), item0, stream)));
      }
      if (edges > 0) {
        GEMMD_GPU_RETURN_IF_ERROR((LaunchGrid<D, kTransA, kTransB, kChunk, true>(
            p, dim3(edges, 1, items), item0, stream)));
      }
    }
  }
  return absl::OkStatus();
}

template <class D, int kChunk>
absl::Status LaunchChunked(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                           cudaStream_t stream) {
  if (!trans_a && !trans_b) return LaunchLayout<D, false, false, kChunk>(p, batch, stream);
  if (!trans_a && trans_b) return LaunchLayout<D, false, true, kChunk>(p, batch, stream);
  if (trans_a && !trans_b) return LaunchLayout<D, true, false, kChunk>(p, batch, stream);
  return LaunchLayout<D, true, true, kChunk>(p, batch, stream);
}

template <class D>
absl::Status LaunchShape(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                         cudaStream_t stream) {
  // 16-byte copies need every row and item of A and B to start 16-byte aligned.
  const bool vec = Aligned16(p.a) && Aligned16(p.b) && p.lda % 2 == 0 && p.ldb % 2 == 0 &&
                   p.stride_a % 2 == 0 && p.stride_b % 2 == 0;
  return vec ? LaunchChunked<D, 2>(p, batch, trans_a, trans_b, stream)
             : LaunchChunked<D, 1>(p, batch, trans_a, trans_b, stream);
}

}  // namespace

absl::Status LaunchDgemmM16n8k8Checked(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                                       cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, false>>(p, batch, trans_a, trans_b, stream);
}

absl::Status LaunchDgemmM16n8k8Grouped(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                                       cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8>>(p, batch, trans_a, trans_b, stream);
}

absl::Status LaunchDgemmM16n8k8Pipelined(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                                         cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8, true>>(p, batch, trans_a, trans_b, stream);
}

absl::Status LaunchDgemmM16n8k8Split(const DgemmArgs& p, int batch, bool trans_a, bool trans_b,
                                     cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8, true, true>>(p, batch, trans_a, trans_b, stream);
}

absl::Status LaunchDgemmM16n8k8SplitUniform(const DgemmArgs& p, int batch, bool trans_a,
                                            bool trans_b, cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8, true, true, true>>(p, batch, trans_a, trans_b,
                                                                  stream);
}

absl::Status LaunchDgemmM16n8k8GroupedSplit(const DgemmArgs& p, int batch, bool trans_a,
                                            bool trans_b, cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8, false, true>>(p, batch, trans_a, trans_b, stream);
}

absl::Status LaunchDgemmM16n8k8GroupedInterleaved(const DgemmArgs& p, int batch, bool trans_a,
                                                  bool trans_b, cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8, false, true, true, true>>(p, batch, trans_a, trans_b,
                                                                         stream);
}

absl::Status LaunchDgemmM16n8k8K32TwoStages(const DgemmArgs& p, int batch, bool trans_a,
                                            bool trans_b, cudaStream_t stream) {
  return LaunchShape<Shape<64, 32, 2, true, 8, false, true, true>>(p, batch, trans_a, trans_b,
                                                                   stream);
}

absl::Status LaunchDgemmM16n8k8Interleaved(const DgemmArgs& p, int batch, bool trans_a,
                                           bool trans_b, cudaStream_t stream) {
  return LaunchShape<Shape<64, 16, 3, true, 8, true, true, true, true>>(p, batch, trans_a, trans_b,
                                                                        stream);
}

}  // namespace gemmd::gpu::internal
