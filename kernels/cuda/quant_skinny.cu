// Skinny weight-only quantized GEMM (see quant_gemm.h): C[M,N] = A[M,K] * dequant(B)^T,
// B INT8 or NVFP4 streamed once, dequantized in registers to FP16, multiplied on the
// tensor cores (WMMA m16n16k16, FP32 accumulation).
//
// Block: 8 warps, 16 rows of B each (128 rows); blocks also split K (grid.y) so that a
// few hundred of them fill the GPU, and add their partial results into C. The block
// walks its K range in 64-wide chunks: all threads stage A's chunk in shared memory
// (every warp uses it), each lane pair loads one row's 64 values with wide loads (the
// next chunk's bytes already in flight), dequantizes them into the warp's tile, and the
// warp runs the MMAs. Profiling the first version (each warp loading its own A
// fragments from L2 and narrow per-row loads) showed L1 throughput at 98% and DRAM at 7%:
// the point of this layout is fewer, wider memory requests.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/quant_gemm.h"

namespace gemmd::gpu {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 8;
constexpr int kWarpRows = 16;  // rows of B (columns of C) per warp
constexpr int kRows = kWarps * kWarpRows;  // per block
constexpr int kChunk = 64;  // K per warp iteration
constexpr int kTileLd = kChunk + 8;  // halves; the pad spreads rows over banks

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

__device__ __forceinline__ float DecodeE2m1(uint32_t code) {
  const uint32_t e = (code >> 1) & 3, m = code & 1;
  const uint32_t bits = (e != 0 ? ((e + 126u) << 23) | (m << 22) : (m != 0 ? (126u << 23) : 0u)) |
                        ((code & 8u) << 28);
  return __uint_as_float(bits);
}

__device__ __forceinline__ float DecodeE4m3(uint32_t byte) {
  const uint32_t e = (byte >> 3) & 15, m = byte & 7;
  return e == 0 ? static_cast<float>(m) * 0x1p-9f : __uint_as_float(((e + 120u) << 23) | (m << 20));
}

// 16-byte asynchronous copy global -> shared (sm_80+), and its group fences.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_group 0;\n" ::); }

// A [m, k] (FP16 or FP32) -> hi (and lo) FP16 [mp, kp], zero-padded.
template <typename T, bool kSplit>
__global__ void ConvertA(const T* __restrict__ a, int64_t m, int64_t k, int64_t mp, int64_t kp,
                         __half* __restrict__ hi, __half* __restrict__ lo) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < mp * kp;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / kp, c = i % kp;
    const float v = (r < m && c < k) ? static_cast<float>(a[r * k + c]) : 0.0f;
    const __half h = __float2half_rn(v);
    hi[i] = h;
    if (kSplit) lo[i] = __float2half_rn(v - __half2float(h));
  }
}

// The raw bytes of one lane's 32 values of a chunk (lanes 2r and 2r+1 share row r).
struct ChunkBytes {
  uint32_t w[8];  // NVFP4: w[0..3] = 16 data bytes, w[4], w[5] = the two scale bytes;
                  // INT8: 32 bytes
};

template <QuantFormat kFormat>
__device__ __forceinline__ void LoadChunk(const uint8_t* __restrict__ data,
                                          const uint8_t* __restrict__ scales, int64_t row,
                                          bool row_ok, int64_t kl, int64_t k, ChunkBytes* out) {
#pragma unroll
  for (int i = 0; i < 8; ++i) out->w[i] = 0;
  if (!row_ok) return;
  if (kFormat == QuantFormat::kNvfp4) {
    // Two groups of 16 values; K % 16 == 0, so a group is whole or past the end.
    const uint8_t* d = data + (row * k + kl) / 2;
    const uint8_t* s = scales + row * (k / 16) + kl / 16;
    if (k % 32 == 0 && kl + 32 <= k) {  // 16-byte aligned data, 2-byte aligned scales
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(d));
      out->w[0] = v.x;
      out->w[1] = v.y;
      out->w[2] = v.z;
      out->w[3] = v.w;
      const uint32_t sc = __ldg(reinterpret_cast<const unsigned short*>(s));
      out->w[4] = sc & 0xFF;
      out->w[5] = sc >> 8;
    } else {
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        if (kl + g * 16 < k) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(d + g * 8));
          out->w[2 * g] = v.x;
          out->w[2 * g + 1] = v.y;
          out->w[4 + g] = __ldg(s + g);
        }
      }
    }
  } else {
    const uint8_t* d = data + row * k + kl;
    if (k % 16 == 0 && kl + 32 <= k) {
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(d + g * 16));
        out->w[4 * g] = v.x;
        out->w[4 * g + 1] = v.y;
        out->w[4 * g + 2] = v.z;
        out->w[4 * g + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        if (kl + i < k) out->w[i / 4] |= static_cast<uint32_t>(__ldg(d + i)) << (8 * (i % 4));
      }
    }
  }
}

// Writes the lane's 32 values, dequantized to FP16 (exactly), at `out` (16-byte aligned).
// NVFP4: a shared table maps each byte to its two E2M1 values (half2), scaled by the
// group's E4M3 scale in one __hmul2 (the product is exact in FP16). INT8: bytes become
// halves through the 0x6400 exponent trick (1024 + byte), minus 1152, also exact.
template <QuantFormat kFormat>
__device__ __forceinline__ void Dequantize(const ChunkBytes& in, const __half2* __restrict__ lut,
                                           __half* __restrict__ out) {
  uint4* out4 = reinterpret_cast<uint4*>(out);
  if (kFormat == QuantFormat::kNvfp4) {
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const __half2 scale = __half2half2(__float2half_rn(DecodeE4m3(in.w[4 + g])));
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const uint32_t word = in.w[2 * g + q];
        __align__(16) __half2 h[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) h[b] = __hmul2(lut[(word >> (8 * b)) & 0xFF], scale);
        out4[g * 2 + q] = *reinterpret_cast<const uint4*>(h);
      }
    }
  } else {
    const __half2 bias = __half2half2(__float2half_rn(1152.0f));
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // 8 words of 4 bytes = 32 values, 8 per uint4
      __align__(16) __half2 h[4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t x = in.w[2 * q + j] ^ 0x80808080u;  // int8 -> uint8 + 128
        const uint32_t lo = __byte_perm(x, 0x64646464u, 0x4140);
        const uint32_t hi = __byte_perm(x, 0x64646464u, 0x4342);
        h[2 * j] = __hsub2(*reinterpret_cast<const __half2*>(&lo), bias);
        h[2 * j + 1] = __hsub2(*reinterpret_cast<const __half2*>(&hi), bias);
      }
      out4[q] = *reinterpret_cast<const uint4*>(h);
    }
  }
}

// Shared memory of one block, in dynamic shared memory (over 48 KB for the largest
// variants): the warps' B tiles (reused for the epilogue's partial sums), two buffers of
// A's chunk (the next one arrives by cp.async while this one is used), the E2M1 table.
template <int kMTiles, bool kSplit>
struct SkinnySmem {
  static constexpr int kAParts = kSplit ? 2 : 1;
  __half tiles[kWarps][kWarpRows][kTileLd];
  __half a_tile[2][kAParts][kMTiles * 16][kTileLd];
  __half2 lut[256];
};

template <QuantFormat kFormat, int kMTiles, bool kSplit>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyKernel(const __half* __restrict__ a_hi, const __half* __restrict__ a_lo, int64_t kp,
                 int64_t k_per_block, const uint8_t* __restrict__ data,
                 const uint8_t* __restrict__ scales, float tensor_scale, int64_t n, int64_t k,
                 int64_t m, float* __restrict__ c) {
  using Smem = SkinnySmem<kMTiles, kSplit>;
  constexpr int kAParts = Smem::kAParts;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  if (kFormat == QuantFormat::kNvfp4) {
    const uint32_t b = threadIdx.x;  // 256 threads, one entry each
    sm.lut[b] = __halves2half2(__float2half_rn(DecodeE2m1(b & 15)),
                               __float2half_rn(DecodeE2m1(b >> 4)));
    __syncthreads();  // the table is read by every lane from the first chunk on
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = int64_t{blockIdx.x} * kRows + warp * kWarpRows;  // the warp's rows
  const int64_t row = n0 + lane / 2;
  const bool row_ok = row < n;
  const int half_index = lane % 2;  // which 32 of the chunk's 64 values
  const int64_t k_begin = int64_t{blockIdx.y} * k_per_block;
  const int64_t k_end = k_begin + k_per_block < kp ? k_begin + k_per_block : kp;

  // Stages A's chunk at kc (kMTiles*16 rows x 64 halves, 8 x 16 bytes a row, per part)
  // into buffer `buf` asynchronously.
  auto stage_a = [&](int64_t kc, int buf) {
    for (int i = threadIdx.x; i < kAParts * kMTiles * 16 * 8; i += kWarps * 32) {
      const int part = i / (kMTiles * 16 * 8), r = (i / 8) % (kMTiles * 16), q = i % 8;
      const __half* src = (part == 0 ? a_hi : a_lo) + int64_t{r} * kp + kc + q * 8;
      CpAsync16(&sm.a_tile[buf][part][r][q * 8], src);
    }
    CpAsyncCommit();
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kMTiles];
#pragma unroll
  for (int t = 0; t < kMTiles; ++t) wmma::fill_fragment(acc[t], 0.0f);

  ChunkBytes next;
  if (k_begin < k_end) {
    LoadChunk<kFormat>(data, scales, row, row_ok, k_begin + half_index * 32, k, &next);
    stage_a(k_begin, 0);
  }
  int buf = 0;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kChunk, buf ^= 1) {
    const ChunkBytes cur = next;
    if (k0 + kChunk < k_end) {  // the next chunk's bytes fly while this one computes
      LoadChunk<kFormat>(data, scales, row, row_ok, k0 + kChunk + half_index * 32, k, &next);
    }
    Dequantize<kFormat>(cur, sm.lut, &sm.tiles[warp][lane / 2][half_index * 32]);
    CpAsyncWaitAll();  // this chunk's A (the only group in flight)
    __syncthreads();   // A visible to all, tiles written, the other buffer free again
    if (k0 + kChunk < k_end) stage_a(k0 + kChunk, buf ^ 1);
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> b_frag;
      wmma::load_matrix_sync(b_frag, &sm.tiles[warp][0][kk * 16], kTileLd);
#pragma unroll
      for (int t = 0; t < kMTiles; ++t) {
#pragma unroll
        for (int part = 0; part < kAParts; ++part) {
          // A^T's tile (K x M, column-major) is A's rows t*16.. at columns kk*16..
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> a_frag;
          wmma::load_matrix_sync(a_frag, &sm.a_tile[buf][part][t * 16][kk * 16], kTileLd);
          wmma::mma_sync(acc[t], b_frag, a_frag, acc[t]);
        }
      }
    }
    __syncwarp();  // the warp's tile is rewritten next chunk
  }

  // Each warp owns its 16 columns of C; its tile becomes its scratch for the partial
  // sums: element (n_i, m_j) at [m_j * 16 + n_i], so consecutive lanes write
  // consecutive columns. With K split over blocks (gridDim.y > 1) the blocks add into
  // C, which the launcher zeroed.
  float* partial = reinterpret_cast<float*>(&sm.tiles[warp][0][0]);
#pragma unroll
  for (int t = 0; t < kMTiles; ++t) {
    __syncwarp();
    wmma::store_matrix_sync(partial, acc[t], 16, wmma::mem_col_major);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int idx = lane + 32 * j;
      const int64_t col = n0 + idx % 16;
      const int64_t mm = int64_t{t} * 16 + idx / 16;
      if (col < n && mm < m) {
        const float scale = kFormat == QuantFormat::kInt8
                                ? __ldg(reinterpret_cast<const float*>(scales) + col)
                                : tensor_scale;
        const float v = partial[idx] * scale;
        if (gridDim.y > 1) {
          atomicAdd(c + mm * n + col, v);
        } else {
          c[mm * n + col] = v;
        }
      }
    }
  }
}

template <QuantFormat kFormat, int kMTiles, bool kSplit>
absl::Status LaunchVariant(const __half* hi, const __half* lo, int64_t kp,
                           const DeviceQuantizedWeight& b, int64_t m, float* c,
                           cudaStream_t stream) {
  constexpr int kSmem = static_cast<int>(sizeof(SkinnySmem<kMTiles, kSplit>));
  const auto kernel = SkinnyKernel<kFormat, kMTiles, kSplit>;
  // Per device and variant once would do; the call is cheap and thread-safe either way.
  RETURN_IF_CUDA_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  // One full wave: as many blocks as fit on the GPU at once, rows first, then K split
  // over blocks. A partial second wave would nearly double the time of a kernel this short.
  int device = 0, sms = 0, per_sm = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDevice(&device));
  RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  RETURN_IF_CUDA_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, kSmem));
  const int64_t resident = std::max<int64_t>(1, int64_t{per_sm} * sms);
  const int64_t row_blocks = (b.n + kRows - 1) / kRows;
  const int64_t k_steps = kp / kChunk;
  int64_t k_splits = std::max<int64_t>(1, std::min<int64_t>(k_steps, resident / row_blocks));
  const int64_t k_per_block = (k_steps + k_splits - 1) / k_splits * kChunk;
  k_splits = (kp + k_per_block - 1) / k_per_block;
  if (k_splits > 1) RETURN_IF_CUDA_ERROR(cudaMemsetAsync(c, 0, m * b.n * sizeof(float), stream));
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(k_splits));
  kernel<<<grid, kWarps * 32, kSmem, stream>>>(
      hi, lo, kp, k_per_block, static_cast<const uint8_t*>(b.data),
      static_cast<const uint8_t*>(b.scales), b.tensor_scale, b.n, b.k, m, c);
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <QuantFormat kFormat, bool kSplit>
absl::Status LaunchForFormat(int m_tiles, const __half* hi, const __half* lo, int64_t kp,
                             const DeviceQuantizedWeight& b, int64_t m, float* c,
                             cudaStream_t stream) {
  switch (m_tiles) {
    case 1:
      return LaunchVariant<kFormat, 1, kSplit>(hi, lo, kp, b, m, c, stream);
    case 2:
      return LaunchVariant<kFormat, 2, kSplit>(hi, lo, kp, b, m, c, stream);
    case 3:
      return LaunchVariant<kFormat, 3, kSplit>(hi, lo, kp, b, m, c, stream);
    default:
      return LaunchVariant<kFormat, 4, kSplit>(hi, lo, kp, b, m, c, stream);
  }
}

}  // namespace

size_t SkinnyQuantizedWorkspaceBytes(DataType a_type, int64_t m, int64_t k) {
  const int64_t halves = RoundUp(m, 16) * RoundUp(k, kChunk);
  const int parts = a_type == DataType::kFloat32 ? 2 : 1;
  return static_cast<size_t>(RoundUp(halves * 2, 256) * parts);
}

absl::Status LaunchSkinnyQuantizedGemm(const void* a, DataType a_type, int64_t m,
                                       const DeviceQuantizedWeight& b, float* c,
                                       void* workspace, size_t workspace_bytes,
                                       cudaStream_t stream) {
  if (m < 1 || m > kSkinnyQuantizedMaxM) {
    return absl::InvalidArgumentError(
        absl::StrCat("skinny quantized GEMM takes M in [1, 64]; got ", m));
  }
  if (a_type != DataType::kFloat16 && a_type != DataType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("skinny quantized GEMM takes FLOAT16 or "
                                                   "FLOAT32 activations, not ",
                                                   DataTypeName(a_type)));
  }
  if (b.n < 1 || b.k < 1 || (b.format == QuantFormat::kNvfp4 && b.k % 16 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad quantized weight [", b.n, ", ", b.k, "] (NVFP4 needs K % 16 == 0)"));
  }
  if (a == nullptr || c == nullptr || b.data == nullptr || b.scales == nullptr ||
      workspace == nullptr) {
    return absl::InvalidArgumentError("skinny quantized GEMM: null pointer");
  }
  if (workspace_bytes < SkinnyQuantizedWorkspaceBytes(a_type, m, b.k)) {
    return absl::InvalidArgumentError("skinny quantized GEMM: workspace too small");
  }
  const int64_t mp = RoundUp(m, 16), kp = RoundUp(b.k, kChunk);
  const bool split = a_type == DataType::kFloat32;
  auto* hi = static_cast<__half*>(workspace);
  __half* lo = split ? hi + RoundUp(mp * kp * 2, 256) / 2 : nullptr;
  const int convert_blocks = static_cast<int>(std::min<int64_t>((mp * kp + 255) / 256, 4096));
  if (split) {
    ConvertA<float, true><<<convert_blocks, 256, 0, stream>>>(static_cast<const float*>(a), m,
                                                              b.k, mp, kp, hi, lo);
  } else {
    ConvertA<__half, false><<<convert_blocks, 256, 0, stream>>>(static_cast<const __half*>(a), m,
                                                                b.k, mp, kp, hi, nullptr);
  }
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  const int m_tiles = static_cast<int>(mp / 16);
  if (b.format == QuantFormat::kNvfp4) {
    return split ? LaunchForFormat<QuantFormat::kNvfp4, true>(m_tiles, hi, lo, kp, b, m, c, stream)
                 : LaunchForFormat<QuantFormat::kNvfp4, false>(m_tiles, hi, lo, kp, b, m, c,
                                                               stream);
  }
  return split ? LaunchForFormat<QuantFormat::kInt8, true>(m_tiles, hi, lo, kp, b, m, c, stream)
               : LaunchForFormat<QuantFormat::kInt8, false>(m_tiles, hi, lo, kp, b, m, c, stream);
}

}  // namespace gemmd::gpu
