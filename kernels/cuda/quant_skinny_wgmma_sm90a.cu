// Skinny weight-only NVFP4 GEMM, streaming path on Hopper's warpgroup MMA (sm_90a):
// C[M,N] = A[M,K] * dequant(B)^T for FP16 A with 9 <= M <= 16, B NVFP4.
//
// The ring, the grid and the cluster reduction are those of quant_skinny_stream.cu; what
// differs is the MMA. There each warp reads A's fragments from shared memory (an LDS and
// four PRMT per 16-byte read) and issues one mma.sync m16n8k16 per 8 A rows, weight tile
// and K step. Here each warpgroup issues one wgmma m64n16k16 per K step: the decoded
// weights are its register operand (64 weight rows on the MMA's M side) and A's 16 rows
// are read by the tensor cores from shared memory. The decode delivers each lane's values
// in pairs (k0,k4) (k1,k5) (k2,k6) (k3,k7) of its 8-value word (quant_skinny_device.cuh),
// and the MMA's K order is free as long as both operands follow it, so A is permuted into
// that order once per stage (a 16 KB pass), not once per use.
//
// Measured on the H200 (2026-12-01), 16x8192^2: 0.0206-0.0207 ms against the mma.sync
// streaming path's 0.0209 in the same call; without the permute (wrong results, timing
// only) 0.0189-0.0191. Not worth a second kernel: kept in the history, removed from the
// build (docs/KERNELS.md).
#include "kernels/cuda/quant_skinny_wgmma.h"

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/quant_skinny_device.cuh"
#include "kernels/cuda/wgmma_sm90a.cuh"

namespace gemmd::gpu {
namespace {

using namespace skinny;    // NOLINT: the shared device helpers
using namespace internal;  // NOLINT: the wgmma helpers
namespace cg = cooperative_groups;

constexpr int kThreads = 256;  // two warpgroups of 64 weight rows each
constexpr int kRows = 128;
constexpr int kStageK = 512;  // K values per ring stage: 4 chunks of 128
constexpr int kStages = 3;
constexpr int kMaxClusterSplits = 4;
constexpr int kAN = 16;  // A rows the MMA takes (its N); rows past m repeat row m - 1
// Accumulator sets the K steps rotate over: wgmmas on one accumulator run one after
// another, and an m64n16k16 is too short to hide that (4 sets: 0.0206 ms at 16x8192^2
// against 0.0212 with one, H200).
constexpr int kAccSets = 4;

// A ring stage: the block's rows' codes (256 bytes per row, odd rows' 16-byte groups XOR
// swizzled by 4), scale bytes (36-byte rows) and A's m rows as copied (1024 bytes, see
// ARawSwizzle); then three buffers of A permuted into the MMA's K order, in wgmma's 128-byte
// swizzled K-major layout: 8 panels of 64 K values, each 16 rows x 128 bytes.
constexpr int kCodeRowBytes = kStageK / 2;
constexpr int kCodeBytes = kRows * kCodeRowBytes;
constexpr int kScaleRowPitch = kStageK / 16 + 4;
constexpr int kScaleOffset = kCodeBytes;
constexpr int kAOffset = kScaleOffset + kRows * kScaleRowPitch;
constexpr int kARowBytes = kStageK * 2;
constexpr int kStageBytes = (kAOffset + kAN * kARowBytes + 1023) / 1024 * 1024;
constexpr int kPanelBytes = kAN * 128;
constexpr int kPermBytes = kStageK / 64 * kPanelBytes;
constexpr int kPermOffset = kStages * kStageBytes;
constexpr int kEpiloguePitch = kRows + 4;
constexpr int kPermBuffers = 3;
constexpr size_t kSmemBytes = kPermOffset + kPermBuffers * kPermBytes + 1024;  // + alignment
static_assert(kAN * kEpiloguePitch * 4 <= kPermOffset, "the epilogue fits the ring");

__device__ __forceinline__ int CodeSwizzle(int j, int row) { return j ^ ((row & 1) << 2); }

// Where A's 16-byte group j of stage row n lives within the row: XOR-ed with the row's
// low 3 bits, so that the permute's reads (8 rows, the same 4 groups) and its copies hit 8
// different bank groups.
__device__ __forceinline__ int ARawSwizzle(int j, int n) { return j ^ (n & 7); }

// The permute's work item for thread tid: A row n, chunk c (of 128 values) and word
// position w. A warp takes 8 rows for one c and all w: its stores then land on 8
// different bank groups (the panel chunk depends on w % 2, the swizzle on n % 8).
struct PermuteItem {
  int n, c, w;
};
__device__ __forceinline__ PermuteItem PermuteItemOf(int tid) {
  return {tid % 8 + 8 * (tid / 128), (tid / 32) % 4, (tid / 8) % 4};
}

__device__ __forceinline__ void FenceAccumulators8(float (&d)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64x16 FP32) += A (64x16 FP16, this warp's 16 rows in registers as mma.sync's A
// fragment) * B (16x16 FP16, K-major behind desc_b)^T. Asynchronous.
__device__ __forceinline__ void WgmmaRsF16M64N16K16(float (&d)[8], uint32_t a0, uint32_t a1,
                                                    uint32_t a2, uint32_t a3, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}

// Thread tid writes A's permuted K order for its item (PermuteItemOf): K step q = 8c + 2w + s has, in
// slots 2t + h and 2t + 8 + h, the values 128c + 32t + 8w + 2s + 4h and that + 1 (the
// pairs lane t's word w decodes for steps s = 0, 1). The four source groups t are read
// whole and recombined by PRMT.
__device__ __forceinline__ void PermuteA(const uint8_t* stage, uint8_t* perm, int tid) {
  const PermuteItem item = PermuteItemOf(tid);
  const int n = item.n, c = item.c, w = item.w;
  const uint8_t* row = stage + kAOffset + n * kARowBytes;
  uint4 src[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    src[t] = *reinterpret_cast<const uint4*>(row + 16 * ARawSwizzle(16 * c + 4 * t + w, n));
  }
#pragma unroll
  for (int s = 0; s < 2; ++s) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int p = 2 * s + hi;  // the value's place in its 8-value group: p and p + 4
      const uint32_t sel = p % 2 == 0 ? 0x5410 : 0x7632;
      uint32_t out[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t lo = p / 2 == 0 ? src[t].x : src[t].y;
        const uint32_t up = p / 2 == 0 ? src[t].z : src[t].w;
        out[t] = __byte_perm(lo, up, sel);
      }
      const int q = 8 * c + 2 * w + s;              // the K step
      const int chunk = (q % 4) * 2 + hi;           // 16-byte chunk within the panel row
      *reinterpret_cast<uint4*>(perm + (q / 4) * kPanelBytes + SwizzledChunk(n, chunk)) =
          make_uint4(out[0], out[1], out[2], out[3]);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    SkinnyWgmmaKernel(const __half* __restrict__ a, int m, const uint8_t* __restrict__ data,
                      const uint8_t* __restrict__ scales, float tensor_scale, int64_t n, int k,
                      int k_per_block, float* __restrict__ c) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* const ring = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const uint32_t ring_addr = (raw + 1023u) & ~1023u;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t{blockIdx.x} * kRows;
  const int k_begin = blockIdx.y * k_per_block;
  const int k_end = min(k_begin + k_per_block, k);

  // Copies as in quant_skinny_stream.cu: codes 16 bytes at a time (a warp instruction: 2
  // rows x 256 contiguous bytes), scales 4, A's rows 16.
  constexpr int kCodeCopies = kRows * 16 / kThreads;
  constexpr int kScaleCopies = kRows * 8 / kThreads;
  const int code_j = tid % 16, code_row = tid / 16;
  const uint8_t* code_src[kCodeCopies];
#pragma unroll
  for (int q = 0; q < kCodeCopies; ++q) {
    const int64_t row = min(n0 + code_row + q * (kThreads / 16), n - 1);
    code_src[q] = data + row * (k / 2) + code_j * 16;
  }
  const int code_dst = code_row * kCodeRowBytes + 16 * CodeSwizzle(code_j, code_row);
  const int scale_piece = tid % 8, scale_row = tid / 8;
  const uint8_t* scale_src[kScaleCopies];
#pragma unroll
  for (int q = 0; q < kScaleCopies; ++q) {
    const int64_t row = min(n0 + scale_row + q * (kThreads / 8), n - 1);
    scale_src[q] = scales + row * (k / 16) + scale_piece * 4;
  }
  const int scale_dst = kScaleOffset + scale_row * kScaleRowPitch + scale_piece * 4;
  // A: each thread copies the four 16-byte groups it permutes (PermuteItemOf), so that its own wait_group makes them visible to it without a barrier; a
  // row slot past m holds a copy of row m - 1.
  const PermuteItem a_item = PermuteItemOf(tid);
  const int a_n = a_item.n, a_c = a_item.c, a_w = a_item.w;
  const __half* const a_src = a + int64_t{min(a_n, m - 1)} * k;
  uint8_t* const a_dst = ring + kAOffset + a_n * kARowBytes;

  auto issue = [&](int kb, int slot) {
    if (kb < k_end) {
      uint8_t* const stage = ring + slot * kStageBytes;
      {
        const bool in = kb + code_j * 32 < k_end;
        const unsigned offset = in ? static_cast<unsigned>(kb) / 2 : 0;
#pragma unroll
        for (int q = 0; q < kCodeCopies; ++q) {
          CopyAsync16(reinterpret_cast<uint4*>(stage + code_dst +
                                               q * (kThreads / 16) * kCodeRowBytes),
                      code_src[q] + offset, in ? 16 : 0);
        }
      }
      {
        const bool in = kb + scale_piece * 64 < k_end;
        const unsigned offset = in ? static_cast<unsigned>(kb) / 16 : 0;
#pragma unroll
        for (int q = 0; q < kScaleCopies; ++q) {
          CopyAsync4(stage + scale_dst + q * (kThreads / 8) * kScaleRowPitch,
                     scale_src[q] + offset, in ? 4 : 0);
        }
      }
#pragma unroll
      for (int t4 = 0; t4 < 4; ++t4) {
        const int j = 16 * a_c + 4 * t4 + a_w;
        const bool in = kb + j * 8 < k_end;
        CopyAsync16(reinterpret_cast<uint4*>(a_dst + slot * kStageBytes +
                                             16 * ARawSwizzle(j, a_n)),
                    a_src + (in ? kb + j * 8 : 0), in ? 16 : 0);
      }
    }
    CopyAsyncCommit();
  };

  float acc[kAccSets][8];
#pragma unroll
  for (int x = 0; x < kAccSets; ++x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[x][i] = 0.0f;
  }

  // The lane's weight rows: g and g + 8 of its warp's 16 (warp % 4 of its warpgroup's 64).
  const int row0 = 64 * (warp / 4) + 16 * (warp % 4) + g;
  int code_off[2], scale_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    code_off[h] = (row0 + 8 * h) * kCodeRowBytes;
    scale_off[h] = kScaleOffset + (row0 + 8 * h) * kScaleRowPitch + 2 * t;
  }

  // A chunk: the lane's 16 bytes (32 values, words w = 0..3) of rows g and g + 8, decoded
  // into two sets of fragment registers alternately, so that a chunk is decoded while the
  // previous chunk's wgmmas still read the other set.
  uint32_t frag[2][4][2][4];  // [set][word][row g, g + 8][pair]
  auto compute_chunk = [&](const uint8_t* stage, uint64_t perm_desc, int chunk, int set) {
    const int j = 4 * chunk + t;
    uint4 d[2];
    uint32_t scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      d[h] = *reinterpret_cast<const uint4*>(stage + code_off[h] + 16 * CodeSwizzle(j, g));
      scale[h] = E4m3x2ToHalf2(
          *reinterpret_cast<const unsigned short*>(stage + scale_off[h] + 8 * chunk));
    }
    WgmmaWait<1>();  // the wgmmas that read this set (two chunks ago) are done
#pragma unroll
    for (int word = 0; word < 4; ++word) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4& v = d[h];
        DecodeScaledE2m1Word(word == 0 ? v.x : word == 1 ? v.y : word == 2 ? v.z : v.w,
                             scale[h], word, frag[set][word][h]);
      }
    }
#pragma unroll
    for (int x = 0; x < kAccSets; ++x) FenceAccumulators8(acc[x]);
    WgmmaFence();
#pragma unroll
    for (int word = 0; word < 4; ++word) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int q = 8 * chunk + 2 * word + s;
        // The descriptor's address field counts 16 bytes: panel q / 4, 32 bytes per step.
        const uint64_t desc = perm_desc + (q / 4) * (kPanelBytes / 16) + 2 * (q % 4);
        WgmmaRsF16M64N16K16(acc[q % kAccSets], frag[set][word][0][2 * s], frag[set][word][1][2 * s],
                            frag[set][word][0][2 * s + 1], frag[set][word][1][2 * s + 1],
                            desc);
      }
    }
    WgmmaCommit();
#pragma unroll
    for (int x = 0; x < kAccSets; ++x) FenceAccumulators8(acc[x]);
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(k_begin + s * kStageK, s);
  int slot = 0, perm_buf = 0;
  for (int kb = k_begin; kb < k_end; kb += kStageK) {
    CopyAsyncWait<kStages - 2>();  // this thread's copies of the stage have landed
    const uint8_t* stage = ring + slot * kStageBytes;
    // Three buffers: the one written here was last read by the wgmmas of three stages
    // ago, which every warpgroup waited for (WgmmaWait<1> in the next stage's chunks)
    // before it reached the last barrier.
    PermuteA(stage, ring + kPermOffset + perm_buf * kPermBytes, tid);
    FenceProxyAsync();  // the generic-proxy stores, visible to the tensor cores
    __syncthreads();  // everyone's copies and permuted A are in; the oldest slot is free
    issue(kb + (kStages - 1) * kStageK, (slot + kStages - 1) % kStages);
    const uint64_t desc = SmemDesc(ring_addr + kPermOffset + perm_buf * kPermBytes);
#pragma unroll
    for (int chunk = 0; chunk < kStageK / 128; ++chunk) {
      compute_chunk(stage, desc, chunk, chunk % 2);
    }
    slot = slot == kStages - 1 ? 0 : slot + 1;
    perm_buf = perm_buf == kPermBuffers - 1 ? 0 : perm_buf + 1;
  }
  WgmmaWait<0>();
#pragma unroll
  for (int x = 0; x < kAccSets; ++x) FenceAccumulators8(acc[x]);
#pragma unroll
  for (int x = 1; x < kAccSets; ++x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[0][i] += acc[x][i];
  }
  CopyAsyncWait<0>();
  __syncthreads();  // the epilogue reuses the ring

  // acc: weight rows row0 (i % 4 < 2) and row0 + 8, A rows 8 (i / 4) + 2t + i % 2.
  const float out_scale = 16384.0f * tensor_scale;  // undo the decode's 2^-14
  const int splits = static_cast<int>(gridDim.y);
  float(*block)[kEpiloguePitch] = reinterpret_cast<float(*)[kEpiloguePitch]>(ring);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int col = 8 * (i / 4) + 2 * t + i % 2, row = row0 + 8 * ((i / 2) % 2);
    if (splits > 1) {
      block[col][row] = acc[0][i];
    } else if (col < m && n0 + row < n) {
      c[col * n + n0 + row] = acc[0][i] * out_scale;
    }
  }
  if (splits == 1) return;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int shift = splits == 2 ? 6 : 5;  // log2(kRows / splits)
  const int rows_per = 1 << shift, rank = static_cast<int>(blockIdx.y);
  for (int idx = tid; idx < (m << shift); idx += kThreads) {
    const int r = rank * rows_per + (idx & (rows_per - 1)), col = idx >> shift;
    float sum = 0.0f;
    for (int q = 0; q < splits; ++q) {
      sum += cluster.map_shared_rank(&block[0][0], q)[col * kEpiloguePitch + r];
    }
    if (n0 + r < n) c[col * n + n0 + r] = sum * out_scale;
  }
  cluster.sync();
}

}  // namespace

absl::Status LaunchSkinnyWgmma(const void* a, int64_t m, const DeviceQuantizedWeight& b,
                               float* c, int k_splits_override, bool fill_required,
                               cudaStream_t stream) {
  if (!SkinnyStreamRuns(a, m, b) || m < 9 || c == nullptr) {
    return absl::FailedPreconditionError(
        "the wgmma skinny kernel takes NVFP4 B with K % 64 == 0, FP16 A of 9-16 rows and "
        "16-byte aligned codes, 4-byte aligned scales");
  }
  const auto kernel = SkinnyWgmmaKernel;
  const absl::StatusOr<DeviceFacts> facts = CurrentDeviceFacts();
  if (!facts.ok()) return facts.status();
  if (facts->major != 9 || facts->minor != 0) {
    return absl::FailedPreconditionError("the wgmma skinny kernel runs on sm_90 only");
  }
  if (kSmemBytes > static_cast<size_t>(facts->smem_optin)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the wgmma skinny kernel needs ", kSmemBytes,
                     " bytes of shared memory per block; the device allows ", facts->smem_optin));
  }
  constexpr int kMaxCachedDevices = 64;
  const int device = facts->device;
  static std::atomic<bool> raised[kMaxCachedDevices] = {};
  if (device < 0 || device >= kMaxCachedDevices || !raised[device].load()) {
    RETURN_IF_CUDA_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(kSmemBytes)));
    if (device >= 0 && device < kMaxCachedDevices) raised[device].store(true);
  }
  const int64_t row_blocks = (b.n + kRows - 1) / kRows;
  const int64_t stages = (b.k + kStageK - 1) / kStageK;
  int64_t splits = k_splits_override > 0 ? k_splits_override : facts->sms / row_blocks;
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(kMaxClusterSplits, stages));
  if (!facts->cluster_launch) splits = 1;
  if (splits == 3) splits = 2;
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  while (splits > 1 && k_splits_override <= 0) {
    static std::atomic<int> fitting[kMaxCachedDevices][kMaxClusterSplits + 1] = {};
    const bool cacheable = device >= 0 && device < kMaxCachedDevices;
    int clusters = cacheable ? fitting[device][splits].load(std::memory_order_relaxed) : 0;
    if (clusters == 0) {
      config.gridDim = dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits));
      attribute[0].val.clusterDim.y = static_cast<unsigned>(splits);
      config.numAttrs = 1;
      RETURN_IF_CUDA_ERROR(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
      clusters = std::max(clusters, -1);
      if (cacheable) fitting[device][splits].store(clusters == 0 ? -1 : clusters);
    }
    if (clusters >= row_blocks) break;
    splits /= 2;
  }
  if (fill_required && row_blocks * splits < int64_t{facts->sms} * 3 / 4) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the wgmma skinny kernel would run ", row_blocks * splits, " blocks on ", facts->sms,
        " SMs"));
  }
  const int64_t k_per_block = (stages + splits - 1) / splits * kStageK;
  config.gridDim = dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits));
  attribute[0].val.clusterDim.y = static_cast<unsigned>(splits);
  config.numAttrs = splits > 1 ? 1 : 0;
  RETURN_IF_CUDA_ERROR(cudaLaunchKernelEx(
      &config, kernel, static_cast<const __half*>(a), static_cast<int>(m),
      static_cast<const uint8_t*>(b.data), static_cast<const uint8_t*>(b.scales), b.tensor_scale,
      b.n, static_cast<int>(b.k), static_cast<int>(k_per_block), c));
  return absl::OkStatus();
}

}  // namespace gemmd::gpu
