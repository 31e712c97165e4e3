// Skinny weight-only GEMM, streaming path (see quant_skinny_stream.h): C[M,N] =
// A[M,K] * dequant(B)^T for FP16 A with M <= 64, B NVFP4 or INT8.
//
// Why a second kernel: the ring path of quant_skinny.cu has 32 weight rows per block, so
// every block reads all of A (at M = 16 and K = 8192 that is 256 KB per block, 67 MB of
// L2 traffic against NVFP4 B's 37.7 MB from HBM; at M = 64, 268 MB) and each warp reads
// its A fragments for one 16-row tile only. Here a block owns 128 rows and streams them
// through a shared-memory ring together with A's rows of the same K range, so A is read
// once per 128 rows; each warp takes 32 rows (two 16-row tiles, which share every A
// fragment it reads) of one half of a stage's K range. When 128-row blocks are too few to
// fill the GPU, blocks split K and are launched as a thread-block cluster (up to 4) whose
// partial sums are added through distributed shared memory: no atomics and no zeroing
// pass over C. What it buys over the register path: little at 16 rows, where both are
// bound by instruction issue (the decode is ~55% of the instructions), not by HBM; more
// with more A rows (0.0405 against 0.1024 ms at 64x8192^2 NVFP4 on the H200; the
// measurements are in docs/KERNELS.md).
//
// The decodes, the MMA mapping (roles swapped: weight rows on the MMA's M side, A rows on
// its N side) and the exactness argument are those of quant_skinny.cu.
#include <cooperative_groups.h>
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
#include "kernels/cuda/quantized/quant_skinny_device.cuh"
#include "kernels/cuda/quantized/quant_skinny_stream.h"

namespace gemmd::gpu {
namespace {

using namespace skinny;  // NOLINT: the shared device helpers
namespace cg = cooperative_groups;

// Warps sharing a row pair's stage, each taking kStageK / kKParts of its K range. 2 (8
// warps, 149 registers) measured faster than 4 (16 warps, 120 registers), docs/KERNELS.md.
constexpr int kKParts = 2;
constexpr int kWarps = 4 * kKParts;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 128;    // weight rows per block: 4 pairs of 16-row tiles
constexpr int kMaxClusterSplits = 4;

// The ring for kMTiles 8-row tiles of A: K values per stage (whole warp chunks for every
// K part) and depth. NVFP4: 512 values and 3 stages up to 32 A rows (207 KiB at 32); 33-64
// rows take 256 x 3 (153 KiB; A is most of a stage): 256 x 4 measured barely faster and
// 512 x 2 slower (docs/KERNELS.md), and 3 stages keep it within an A100's 163 KiB. INT8
// takes the same code bytes per stage (half the K values, so half the A bytes) and no
// scales: its per-row scales go to the epilogue.
template <QuantFormat kFormat, int kMTiles>
struct Ring {
  static constexpr bool kNvfp4 = kFormat == QuantFormat::kNvfp4;
  static constexpr int kStageK = (kMTiles <= 4 ? 512 : 256) / (kNvfp4 ? 1 : 2);
  static constexpr int kStages = 3;
  // One stage: the block's rows' codes for the stage's K range (kStageK / 2 bytes per
  // NVFP4 row, kStageK per INT8 row; the 16-byte groups of odd rows XOR-swizzled by 4 so
  // that rows g and g + 1 of a warp read hit different banks), NVFP4's scale bytes
  // (kStageK / 16 per row, padded by 8: a read's 8 rows then start 10 or 6 banks apart, on
  // different banks; with 4, rows 0 and 7 of a 512-value stage shared one) and A's m rows
  // (swizzled: see ASwizzle). The padding costs nothing after the 1 KiB rounding.
  static constexpr int kCodeRowBytes = kNvfp4 ? kStageK / 2 : kStageK;
  static constexpr int kValuesPerGroup = kNvfp4 ? 32 : 16;   // in a lane's 16 code bytes
  static constexpr int kChunks = kCodeRowBytes / 64 / kKParts;  // warp chunks per warp, stage
  static constexpr int kCodeGroups = kCodeRowBytes / 16;     // 16-byte copies per code row
  static constexpr int kScalePieces = kNvfp4 ? kStageK / 64 : 0;  // 4-byte copies per row
  static constexpr int kAGroups = kStageK / 8;                // 16-byte copies per A row
  static constexpr int kCodeBytes = kRows * kCodeRowBytes;
  static constexpr int kScaleRowPitch = kNvfp4 ? kStageK / 16 + 8 : 0;
  static constexpr int kScaleOffset = kCodeBytes;
  static constexpr int kAOffset = kScaleOffset + kRows * kScaleRowPitch;
  static constexpr int kARowBytes = kStageK * 2;
  static_assert(kChunks >= 1 && kThreads % kCodeGroups == 0 && kThreads % kAGroups == 0 &&
                    kThreads % (kNvfp4 ? kScalePieces : 1) == 0,
                "a stage is whole warp chunks and whole copy rounds");

  __host__ __device__ static constexpr int StageBytes(int m) {
    return (kAOffset + m * kARowBytes + 1023) / 1024 * 1024;
  }
};

// After the loop the ring holds the other K parts' partial sums, for the first part's
// warps to add to theirs, then (K split over a cluster) the block's sums for the cluster.
// [A row][weight row], padded so that a warp's 32 accesses (A rows 2t, 2t + 1; weight
// rows g) hit 32 banks.
constexpr int kEpiloguePitch = kRows + 4;
template <int kMTiles>
struct EpilogueSmem {
  float part[kKParts - 1][kMTiles * 8][kEpiloguePitch];
  float block[kMTiles * 8][kEpiloguePitch];
};

template <QuantFormat kFormat, int kMTiles>
constexpr size_t SmemBytes(int m) {
  using R = Ring<kFormat, kMTiles>;
  const size_t ring = size_t{R::kStages} * R::StageBytes(m);
  return std::max(ring, sizeof(EpilogueSmem<kMTiles>));
}

// Where A's 16-byte group j (8 halves) of row r lives within the row. A warp's read of one
// NVFP4 word takes rows g, g + 1 (the 8 lanes of a read phase) and t = 0..3, groups
// 16c + 4t + w: bit 2 of the physical group is t's low bit, bits 0-1 w XOR (t's high bit,
// the row's parity), so the 8 lanes of a phase land on 8 different 16-byte bank groups.
// INT8 reads groups 8c + 2t + p: bits 1-2 are t, XOR-ed with a constant, bit 0 p XOR the
// row's parity: 8 different bank groups too.
__device__ __forceinline__ int ASwizzle(int j, int row) {
  return j ^ (((j >> 3) & 1) << 1) ^ (row & 1);
}

__device__ __forceinline__ int CodeSwizzle(int j, int row) { return j ^ ((row & 1) << 2); }

template <QuantFormat kFormat, int kMTiles>
__global__ void __launch_bounds__(kThreads, 1)
    SkinnyStreamKernel(const __half* __restrict__ a, const float* __restrict__ a_row_scale,
                       int m, const uint8_t* __restrict__ data,
                       const uint8_t* __restrict__ scales, float tensor_scale, int64_t n, int k,
                       int k_per_block, float* __restrict__ c) {
  using R = Ring<kFormat, kMTiles>;
  constexpr bool kNvfp4 = R::kNvfp4;
  constexpr int kValuesPerGroup = R::kValuesPerGroup;
  constexpr int kStageK = R::kStageK, kStages = R::kStages, kChunks = R::kChunks;
  constexpr int kCodeRowBytes = R::kCodeRowBytes, kScaleRowPitch = R::kScaleRowPitch;
  constexpr int kScaleOffset = R::kScaleOffset, kAOffset = R::kAOffset;
  constexpr int kARowBytes = R::kARowBytes;
  extern __shared__ uint4 smem_raw[];
  uint8_t* const ring = reinterpret_cast<uint8_t*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int pair = warp % 4, part = warp / 4;  // rows 32 * pair.., K part of each stage
  const int64_t n0 = int64_t{blockIdx.x} * kRows;
  const int k_begin = blockIdx.y * k_per_block;
  const int k_end = min(k_begin + k_per_block, k);
  const int stage_bytes = R::StageBytes(m);

  // Copies: thread tid takes the 16-byte group tid % G of rows tid / G + q * kThreads / G
  // of the codes (G = kCodeGroups; a warp instruction covers whole stage rows, 512
  // bytes), the 4-byte scale piece tid % P of rows tid / P + q * kThreads / P
  // (P = kScalePieces), and A's 16-byte group tid % kAGroups of rows tid / kAGroups +
  // q * kThreads / kAGroups.
  constexpr int kCodeGroups = R::kCodeGroups, kScalePieces = R::kScalePieces;
  constexpr int kAGroups = R::kAGroups;
  constexpr int kCodeCopies = kRows * kCodeGroups / kThreads;
  constexpr int kScaleCopies = kNvfp4 ? kRows * kScalePieces / kThreads : 1;
  constexpr int kScaleDiv = kNvfp4 ? kScalePieces : 1;  // (INT8 copies no scales)
  const int64_t row_bytes = kNvfp4 ? k / 2 : k;
  const int code_j = tid % kCodeGroups, code_row = tid / kCodeGroups;
  const uint8_t* code_src[kCodeCopies];
#pragma unroll
  for (int q = 0; q < kCodeCopies; ++q) {
    const int64_t row = min(n0 + code_row + q * (kThreads / kCodeGroups), n - 1);
    code_src[q] = data + row * row_bytes + code_j * 16;
  }
  const int code_dst = code_row * kCodeRowBytes + 16 * CodeSwizzle(code_j, code_row);
  const int scale_piece = tid % kScaleDiv, scale_row = tid / kScaleDiv;
  const uint8_t* scale_src[kScaleCopies] = {};
  if constexpr (kNvfp4) {
#pragma unroll
    for (int q = 0; q < kScaleCopies; ++q) {
      const int64_t row = min(n0 + scale_row + q * (kThreads / kScaleDiv), n - 1);
      scale_src[q] = scales + row * (k / 16) + scale_piece * 4;
    }
  }
  const int scale_dst = kScaleOffset + scale_row * kScaleRowPitch + scale_piece * 4;
  const int a_j = tid % kAGroups, a_row = tid / kAGroups;

  auto issue = [&](int kb, int slot) {
    if (kb < k_end) {
      uint8_t* const stage = ring + slot * stage_bytes;
      {  // codes: a 16-byte group is 32 (16) values, whole or past K (K % 64 (16) == 0)
        const bool in = kb + code_j * kValuesPerGroup < k_end;
        const unsigned offset = in ? static_cast<unsigned>(kb) / (kNvfp4 ? 2 : 1) : 0;
#pragma unroll
        for (int q = 0; q < kCodeCopies; ++q) {
          CpAsync16(reinterpret_cast<uint4*>(stage + code_dst +
                                               q * (kThreads / kCodeGroups) * kCodeRowBytes),
                      code_src[q] + offset, in ? 16 : 0);
        }
      }
      if constexpr (kNvfp4) {  // scales: a 4-byte piece is 64 values
        const bool in = kb + scale_piece * 64 < k_end;
        const unsigned offset = in ? static_cast<unsigned>(kb) / 16 : 0;
#pragma unroll
        for (int q = 0; q < kScaleCopies; ++q) {
          CpAsync4(stage + scale_dst + q * (kThreads / kScalePieces) * kScaleRowPitch,
                     scale_src[q] + offset, in ? 4 : 0);
        }
      }
      const bool a_in = kb + a_j * 8 < k_end;
      for (int row = a_row; row < m; row += kThreads / kAGroups) {
        CpAsync16(reinterpret_cast<uint4*>(stage + kAOffset + row * kARowBytes +
                                             16 * ASwizzle(a_j, row)),
                    a + int64_t{row} * k + (a_in ? kb + a_j * 8 : 0), a_in ? 16 : 0);
      }
    }
    CpAsyncCommit();  // one group per call, empty or not, so wait_group counts stages
  };

  float acc[2][kMTiles][4];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][mt][i] = 0.0f;
    }
  }

  // The lane's fixed offsets within a stage: its rows (g, g + 8 of each tile) and A rows
  // (g of each 8-row tile, clamped to m - 1: rows past m only feed dropped columns).
  int code_off[2][2], scale_off[2][2], a_off[kMTiles], a_lane_row[kMTiles];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 32 * pair + 16 * rt + g + 8 * h;
      code_off[rt][h] = r * kCodeRowBytes;
      scale_off[rt][h] = kScaleOffset + r * kScaleRowPitch + 8 * kChunks * part + 2 * t;
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    a_lane_row[mt] = min(mt * 8 + g, m - 1);
    a_off[mt] = kAOffset + a_lane_row[mt] * kARowBytes;
  }

  auto compute = [&](const uint8_t* stage) {
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
      // The chunk's 16 bytes of rows g, g + 8 (NVFP4: 32 values and their two scales;
      // INT8: 16 values).
      const int chunk = kChunks * part + ch;  // of the stage's 4 (2 at 33-64 rows)
      const int j = 4 * chunk + t;            // the lane's code group within a row
      uint4 d[2][2];
      uint32_t scale[2][2];
#pragma unroll
      for (int rt = 0; rt < 2; ++rt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = g + 8 * h;  // parity as the row's: tiles start at even rows
          d[rt][h] = *reinterpret_cast<const uint4*>(stage + code_off[rt][h] +
                                                     16 * CodeSwizzle(j, r));
          if constexpr (kNvfp4) {
            scale[rt][h] = E4m3x2ToHalf2(
                *reinterpret_cast<const unsigned short*>(stage + scale_off[rt][h] + 8 * ch));
          }
        }
      }
      if constexpr (!kNvfp4) {
        // INT8: word w holds values 4w..4w + 3 of the group, one K step in natural order,
        // (k0,k1) (k2,k3); A's two words' 8 values are one 16-byte read per A tile.
#pragma unroll
        for (int pair_of_words = 0; pair_of_words < 2; ++pair_of_words) {
          uint32_t bfrag[kMTiles][2][2];
          const int aj = 8 * chunk + 2 * t + pair_of_words;
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            const uint4 x = *reinterpret_cast<const uint4*>(stage + a_off[mt] +
                                                            16 * ASwizzle(aj, a_lane_row[mt]));
            bfrag[mt][0][0] = x.x, bfrag[mt][0][1] = x.y;
            bfrag[mt][1][0] = x.z, bfrag[mt][1][1] = x.w;
          }
#pragma unroll
          for (int rt = 0; rt < 2; ++rt) {
#pragma unroll
            for (int wi = 0; wi < 2; ++wi) {
              const int word = 2 * pair_of_words + wi;
              uint32_t p[2][2];
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const uint4& v = d[rt][h];
                DecodeInt8Word(word == 0 ? v.x : word == 1 ? v.y : word == 2 ? v.z : v.w, p[h]);
              }
#pragma unroll
              for (int mt = 0; mt < kMTiles; ++mt) {
                Mma(acc[rt][mt], p[0][0], p[1][0], p[0][1], p[1][1], bfrag[mt][wi][0],
                    bfrag[mt][wi][1]);
              }
            }
          }
        }
      } else {
#pragma unroll
        for (int word = 0; word < 4; ++word) {
          // A's 8 values at the word's K positions, one 16-byte read per A tile, shared by
          // both weight tiles: (k0,k4) (k1,k5) for step 0, (k2,k6) (k3,k7) for step 1.
          uint32_t bfrag[kMTiles][2][2];
          const int aj = 16 * chunk + 4 * t + word;
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            const uint4 x = *reinterpret_cast<const uint4*>(stage + a_off[mt] +
                                                            16 * ASwizzle(aj, a_lane_row[mt]));
            bfrag[mt][0][0] = __byte_perm(x.x, x.z, 0x5410);
            bfrag[mt][0][1] = __byte_perm(x.x, x.z, 0x7632);
            bfrag[mt][1][0] = __byte_perm(x.y, x.w, 0x5410);
            bfrag[mt][1][1] = __byte_perm(x.y, x.w, 0x7632);
          }
#pragma unroll
          for (int rt = 0; rt < 2; ++rt) {
            uint32_t p[2][4];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint4& v = d[rt][h];
              DecodeScaledE2m1Word(word == 0 ? v.x : word == 1 ? v.y : word == 2 ? v.z : v.w,
                                   scale[rt][h], word, p[h]);
            }
#pragma unroll
            for (int step = 0; step < 2; ++step) {
#pragma unroll
              for (int mt = 0; mt < kMTiles; ++mt) {
                Mma(acc[rt][mt], p[0][2 * step], p[1][2 * step], p[0][2 * step + 1],
                    p[1][2 * step + 1], bfrag[mt][step][0], bfrag[mt][step][1]);
              }
            }
          }
        }
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(k_begin + s * kStageK, s);
  int slot = 0;
  for (int kb = k_begin; kb < k_end; kb += kStageK) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of this stage have landed
    __syncthreads();  // everyone's have; everyone is done with the last stage
    issue(kb + (kStages - 1) * kStageK, (slot + kStages - 1) % kStages);
    compute(ring + slot * stage_bytes);
    slot = slot == kStages - 1 ? 0 : slot + 1;
  }
  CpAsyncWait<0>();
  __syncthreads();  // the epilogue reuses the ring

  // The accumulator holds weight rows g, g + 8 of each tile (i / 2) and A rows 2t, 2t + 1
  // of each A tile (i % 2). The other K parts' warps hand theirs to the first's.
  auto& ep = *reinterpret_cast<EpilogueSmem<kMTiles>*>(smem_raw);
  auto for_each_sum = [&](auto&& f) {
#pragma unroll
    for (int rt = 0; rt < 2; ++rt) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          f(acc[rt][mt][i], mt * 8 + 2 * t + i % 2, 32 * pair + 16 * rt + g + 8 * (i / 2));
        }
      }
    }
  };
  if (part > 0) {
    for_each_sum([&](float v, int col, int row) { ep.part[part - 1][col][row] = v; });
  }
  __syncthreads();
  // A scaled per row (BF16, see quant_skinny.cu): undo that first, as the register path
  // does. Then NVFP4: undo the decode's 2^-14, apply the tensor scale; INT8: the weight
  // row's scale.
  const float out_scale = 16384.0f * tensor_scale;
  const auto scaled = [&](float v, int col, int row) {
    if (a_row_scale != nullptr) v *= __ldg(a_row_scale + col);
    return kNvfp4 ? v * out_scale : v * __ldg(reinterpret_cast<const float*>(scales) + n0 + row);
  };
  const int splits = static_cast<int>(gridDim.y);
  if (part == 0) {
    for_each_sum([&](float& v, int col, int row) {
#pragma unroll
      for (int q = 0; q < kKParts - 1; ++q) v += ep.part[q][col][row];
      if (splits > 1) {
        ep.block[col][row] = v;
      } else if (col < m && n0 + row < n) {
        c[col * n + n0 + row] = scaled(v, col, row);
      }
    });
  }
  if (splits == 1) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // K split over the cluster's blocks (2 or 4): block q adds rows [q, q + 1) * kRows /
  // splits of all of them, read from their shared memory.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int shift = splits == 2 ? 6 : 5;  // log2(kRows / splits)
  const int rows_per = 1 << shift, rank = static_cast<int>(blockIdx.y);
  for (int idx = tid; idx < (m << shift); idx += kThreads) {
    const int r = rank * rows_per + (idx & (rows_per - 1)), col = idx >> shift;
    float sum = 0.0f;
    for (int q = 0; q < splits; ++q) {
      sum += cluster.map_shared_rank(&ep.block[0][0], q)[col * kEpiloguePitch + r];
    }
    if (n0 + r < n) c[col * n + n0 + r] = scaled(sum, col, r);
  }
  cluster.sync();  // no block leaves while others read its shared memory
#endif
}

constexpr int kMaxCachedDevices = 64;

// Whether the loaded code of `kernel` has the cluster reduction: it is compiled for
// sm_90 and up only, and a build without sm_90 code may still run on such a GPU through
// its sm_80 PTX. Queried once per device.
template <typename Kernel>
absl::StatusOr<bool> HasClusterCode(Kernel kernel, int device,
                                    std::atomic<int> (&cached)[kMaxCachedDevices]) {
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known != 0) return known > 0;
  }
  cudaFuncAttributes attributes;
  RETURN_IF_CUDA_ERROR(cudaFuncGetAttributes(&attributes, kernel));
  const bool has = attributes.ptxVersion >= 90;
  if (cacheable) cached[device].store(has ? 1 : -1, std::memory_order_relaxed);
  return has;
}

// How the streaming kernel covers a problem on the current device.
struct StreamPlan {
  int64_t row_blocks = 0;
  int64_t splits = 1;       // the cluster's K split (grid.y)
  int64_t k_per_block = 0;  // K handled by one block
  size_t smem = 0;          // dynamic shared memory for this m
};

// The plan for [m, n, k] (FAILED_PRECONDITION where the device's shared memory is too
// small or, with `fill_required`, the grid would leave more than a quarter of the SMs
// idle). Raises the kernel's shared-memory limit once per device.
template <QuantFormat kFormat, int kMTiles>
absl::StatusOr<StreamPlan> PlanStream(int64_t m, int64_t n, int64_t k, int k_splits_override,
                                      bool fill_required) {
  const auto kernel = SkinnyStreamKernel<kFormat, kMTiles>;
  constexpr int kStageK = Ring<kFormat, kMTiles>::kStageK;
  const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
  if (!facts.ok()) return facts.status();
  const int device = facts->device;
  constexpr size_t kMaxSmem = SmemBytes<kFormat, kMTiles>(kMTiles * 8);
  if (kMaxSmem > static_cast<size_t>(facts->smem_optin)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the streaming skinny kernel needs ", kMaxSmem,
                     " bytes of shared memory per block; the device allows ", facts->smem_optin));
  }
  static std::atomic<int> cluster_code[kMaxCachedDevices] = {};
  const absl::StatusOr<bool> has_cluster_code = HasClusterCode(kernel, device, cluster_code);
  if (!has_cluster_code.ok()) return has_cluster_code.status();
  // Raised once per device to the largest m's need.
  static std::atomic<bool> raised[kMaxCachedDevices] = {};
  if (device < 0 || device >= kMaxCachedDevices || !raised[device].load()) {
    RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxSmem)));
    if (device >= 0 && device < kMaxCachedDevices) raised[device].store(true);
  }
  // One block per SM (the ring takes most of its shared memory). K is split over a
  // cluster of 2 or 4 only as far as it takes to cover the SMs, only where clusters exist,
  // and only while all the clusters fit the GPU at once (docs/KERNELS.md).
  StreamPlan plan;
  plan.row_blocks = (n + kRows - 1) / kRows;
  const int64_t stages = (k + kStageK - 1) / kStageK;
  int64_t splits = k_splits_override > 0 ? k_splits_override : facts->sms / plan.row_blocks;
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kMaxClusterSplits, stages));
  if (facts->major < 9 || !facts->cluster_launch || !*has_cluster_code) splits = 1;
  if (splits == 3) splits = 2;  // the cluster's blocks share the rows' sums evenly
  plan.smem = SmemBytes<kFormat, kMTiles>(static_cast<int>(m));
  if (k_splits_override <= 0) {
    static internal::ClusterFitCache fitting = {};
    const absl::StatusOr<int64_t> fits = internal::SplitThatFits(
        kernel, plan.row_blocks, splits, kThreads, kMaxSmem, device, fitting);
    if (!fits.ok()) return fits.status();
    splits = *fits;
  }
  // Chosen by the selection, this path must keep most SMs busy: with few 128-row blocks
  // (small N, or no clusters to split K) the register path's finer split does better.
  if (fill_required && plan.row_blocks * splits < int64_t{facts->sms} * 3 / 4) {
    return absl::FailedPreconditionError(
        absl::StrCat("the streaming skinny kernel would run ", plan.row_blocks * splits,
                     " blocks on ", facts->sms, " SMs"));
  }
  plan.splits = splits;
  // Blocks whose K range starts past K add zeros to the cluster's sums.
  plan.k_per_block = (stages + splits - 1) / splits * kStageK;
  return plan;
}

template <QuantFormat kFormat, int kMTiles>
absl::Status Launch(const __half* a, const float* a_row_scale, int64_t m,
                    const DeviceQuantizedWeight& b, float* c, int k_splits_override,
                    bool fill_required, cudaStream_t stream) {
  const absl::StatusOr<StreamPlan> plan =
      PlanStream<kFormat, kMTiles>(m, b.n, b.k, k_splits_override, fill_required);
  if (!plan.ok()) return plan.status();
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = internal::SplitKClusterConfig(
      plan->row_blocks, plan->splits, kThreads, plan->smem, stream, &cluster);
  RETURN_IF_CUDA_ERROR(cudaLaunchKernelEx(
      &config, SkinnyStreamKernel<kFormat, kMTiles>, a, a_row_scale, static_cast<int>(m),
      static_cast<const uint8_t*>(b.data), static_cast<const uint8_t*>(b.scales),
      b.tensor_scale, b.n, static_cast<int>(b.k), static_cast<int>(plan->k_per_block), c));
  return absl::OkStatus();
}

absl::Status StreamOperandsError() {
  return absl::FailedPreconditionError(
      "the streaming skinny kernel takes NVFP4 B with K % 64 == 0 or INT8 B with K % 16 == 0, "
      "FP16 A of 1-64 rows and 16-byte aligned codes and A, 4-byte aligned scales");
}

// Calls go(format constant, m-tiles constant) for B's format and m's tile count.
template <typename Go>
auto ForShape(QuantFormat format, int64_t m, Go go) {
  const auto for_format = [&](auto f) {
    if (m <= 8) return go(f, std::integral_constant<int, 1>{});
    if (m <= 16) return go(f, std::integral_constant<int, 2>{});
    if (m <= 32) return go(f, std::integral_constant<int, 4>{});
    return go(f, std::integral_constant<int, 8>{});
  };
  if (format == QuantFormat::kNvfp4) {
    return for_format(std::integral_constant<QuantFormat, QuantFormat::kNvfp4>{});
  }
  return for_format(std::integral_constant<QuantFormat, QuantFormat::kInt8>{});
}

}  // namespace

bool SkinnyStreamRuns(const void* a, int64_t m, const DeviceQuantizedWeight& b) {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // NVFP4 copies scale rows 4 bytes (64 values) at a time; INT8 codes 16 values.
  const int64_t k_multiple = b.format == QuantFormat::kNvfp4 ? 64 : 16;
  return (b.format == QuantFormat::kNvfp4 || b.format == QuantFormat::kInt8) && a != nullptr &&
         b.data != nullptr && b.scales != nullptr && m >= 1 &&
         m <= kSkinnyQuantizedMaxM && b.n >= 1 && b.k >= k_multiple && b.k % k_multiple == 0 &&
         b.k <= (int64_t{1} << 30) && aligned16(a) && aligned16(b.data) &&
         reinterpret_cast<uintptr_t>(b.scales) % 4 == 0;
}

absl::Status SkinnyStreamFits(int64_t m, const DeviceQuantizedWeight& b, bool fill_required) {
  if (!SkinnyStreamRuns(kArenaAligned, m, b)) return StreamOperandsError();
  return ForShape(b.format, m, [&](auto format, auto tiles) {
    return PlanStream<decltype(format)::value, decltype(tiles)::value>(m, b.n, b.k, 0,
                                                                      fill_required)
        .status();
  });
}

absl::Status LaunchSkinnyStream(const void* a, const float* a_row_scale, int64_t m,
                                const DeviceQuantizedWeight& b, float* c, int k_splits_override,
                                bool fill_required, cudaStream_t stream) {
  if (!SkinnyStreamRuns(a, m, b) || c == nullptr) return StreamOperandsError();
  const auto* a16 = static_cast<const __half*>(a);
  return ForShape(b.format, m, [&](auto format, auto tiles) {
    return Launch<decltype(format)::value, decltype(tiles)::value>(
        a16, a_row_scale, m, b, c, k_splits_override, fill_required, stream);
  });
}

}  // namespace gemmd::gpu
