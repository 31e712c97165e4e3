// Skinny weight-only quantized GEMM (see quant_gemm.h): C[M,N] = A[M,K] * dequant(B)^T,
// B INT8 or NVFP4 streamed once, dequantized in registers to FP16, multiplied on the
// tensor cores (WMMA m16n16k16, FP32 accumulation).
//
// Block: 8 warps and 32 rows of B (kRows). Each warp walks K in 64-wide chunks (warp w
// takes chunks w, w+8, ...): lane l loads row l's 64 values (NVFP4 32 bytes + 4 scale
// bytes, INT8 64 bytes), the next chunk's bytes already in flight while this one is
// dequantized into the warp's shared tile and fed to the MMAs; A's fragments come from
// the converted, padded FP16 copy (hot in L2). At the end the 8 warps' partial sums are
// added in shared memory and the scales applied once.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/quant_gemm.h"

namespace gemmd::gpu {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 8;
constexpr int kRows = 32;   // rows of B (columns of C) per block
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

// The raw bytes of one lane's 64 values of a chunk.
struct ChunkBytes {
  uint32_t w[16];  // NVFP4: w[0..7] = 32 data bytes, w[8] = 4 scale bytes; INT8: 64 bytes
};

template <QuantFormat kFormat>
__device__ __forceinline__ void LoadChunk(const uint8_t* __restrict__ data,
                                          const uint8_t* __restrict__ scales, int64_t row,
                                          bool row_ok, int64_t k0, int64_t k, ChunkBytes* out) {
  if (kFormat == QuantFormat::kNvfp4) {
    // 4 groups of 16 values (8 data bytes, 1 scale byte each); K % 16 == 0, so a group is
    // whole or absent.
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const int64_t kg = k0 + g * 16;
      uint2 d = make_uint2(0, 0);
      uint32_t s = 0;
      if (row_ok && kg < k) {
        d = __ldg(reinterpret_cast<const uint2*>(data + (row * k + kg) / 2));
        s = __ldg(scales + row * (k / 16) + kg / 16);
      }
      out->w[2 * g] = d.x;
      out->w[2 * g + 1] = d.y;
      out->w[8 + g] = s;  // one byte per word (w[8..11])
    }
  } else {
    const uint8_t* p = data + row * k + k0;
    const bool vector = (k % 16 == 0);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const int64_t kg = k0 + g * 16;
      uint4 d = make_uint4(0, 0, 0, 0);
      if (row_ok && kg + 16 <= k && vector) {
        d = __ldg(reinterpret_cast<const uint4*>(p + g * 16));
      } else if (row_ok && kg < k) {
        uint8_t b[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) b[i] = kg + i < k ? __ldg(p + g * 16 + i) : 0;
        d.x = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
        d.y = b[4] | (b[5] << 8) | (b[6] << 16) | (static_cast<uint32_t>(b[7]) << 24);
        d.z = b[8] | (b[9] << 8) | (b[10] << 16) | (static_cast<uint32_t>(b[11]) << 24);
        d.w = b[12] | (b[13] << 8) | (b[14] << 16) | (static_cast<uint32_t>(b[15]) << 24);
      }
      out->w[4 * g] = d.x;
      out->w[4 * g + 1] = d.y;
      out->w[4 * g + 2] = d.z;
      out->w[4 * g + 3] = d.w;
    }
  }
}

// Writes the lane's 64 values, dequantized to FP16 (exactly), into its tile row.
template <QuantFormat kFormat>
__device__ __forceinline__ void Dequantize(const ChunkBytes& in, __half* __restrict__ row_out) {
  __align__(16) __half v[kChunk];
  if (kFormat == QuantFormat::kNvfp4) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const float scale = DecodeE4m3(in.w[8 + g]);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t word = in.w[2 * g + i / 8];
        const uint32_t code = (word >> (4 * (i % 8))) & 15;  // even index: low nibble
        v[g * 16 + i] = __float2half_rn(DecodeE2m1(code) * scale);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int8_t q = static_cast<int8_t>((in.w[i / 4] >> (8 * (i % 4))) & 0xFF);
      v[i] = __int2half_rn(q);
    }
  }
#pragma unroll
  for (int i = 0; i < kChunk / 8; ++i) {
    reinterpret_cast<uint4*>(row_out)[i] = reinterpret_cast<const uint4*>(v)[i];
  }
}

template <QuantFormat kFormat, int kMTiles, bool kSplit>
__global__ void __launch_bounds__(kWarps * 32)
    SkinnyKernel(const __half* __restrict__ a_hi, const __half* __restrict__ a_lo, int64_t kp,
                 const uint8_t* __restrict__ data, const uint8_t* __restrict__ scales,
                 float tensor_scale, int64_t n, int64_t k, int64_t m, float* __restrict__ c) {
  __shared__ __align__(32) __half tiles[kWarps][kRows][kTileLd];
  __shared__ __align__(32) float partial[kWarps][256];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = int64_t{blockIdx.x} * kRows;
  const int64_t row = n0 + lane;
  const bool row_ok = row < n;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][kMTiles];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int t = 0; t < kMTiles; ++t) wmma::fill_fragment(acc[r][t], 0.0f);
  }

  ChunkBytes next;
  int64_t k0 = int64_t{warp} * kChunk;
  if (k0 < kp) LoadChunk<kFormat>(data, scales, row, row_ok, k0, k, &next);
  for (; k0 < kp; k0 += kWarps * kChunk) {
    const ChunkBytes cur = next;
    if (k0 + kWarps * kChunk < kp) {  // the next chunk's bytes fly while this one computes
      LoadChunk<kFormat>(data, scales, row, row_ok, k0 + kWarps * kChunk, k, &next);
    }
    Dequantize<kFormat>(cur, &tiles[warp][lane][0]);
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> b0, b1;
      wmma::load_matrix_sync(b0, &tiles[warp][0][kk * 16], kTileLd);
      wmma::load_matrix_sync(b1, &tiles[warp][16][kk * 16], kTileLd);
#pragma unroll
      for (int t = 0; t < kMTiles; ++t) {
        // A^T's 16x16 tile: A rows t*16.., columns k0 + kk*16.. (column-major, ld = kp).
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> af;
        const int64_t at = int64_t{t} * 16 * kp + k0 + kk * 16;
        wmma::load_matrix_sync(af, a_hi + at, static_cast<unsigned>(kp));
        wmma::mma_sync(acc[0][t], b0, af, acc[0][t]);
        wmma::mma_sync(acc[1][t], b1, af, acc[1][t]);
        if (kSplit) {
          wmma::load_matrix_sync(af, a_lo + at, static_cast<unsigned>(kp));
          wmma::mma_sync(acc[0][t], b0, af, acc[0][t]);
          wmma::mma_sync(acc[1][t], b1, af, acc[1][t]);
        }
      }
    }
    __syncwarp();  // the tile is rewritten next iteration
  }

  // Sum the warps' partial tiles; element (n_i, m_j) of a tile sits at [m_j * 16 + n_i],
  // so consecutive threads write consecutive columns of C.
  const int idx = threadIdx.x;
  const int n_i = idx % 16, m_j = idx / 16;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int t = 0; t < kMTiles; ++t) {
      wmma::store_matrix_sync(partial[warp], acc[r][t], 16, wmma::mem_col_major);
      __syncthreads();
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += partial[w][idx];
      const int64_t col = n0 + r * 16 + n_i;
      const int64_t mm = int64_t{t} * 16 + m_j;
      if (col < n && mm < m) {
        const float scale = kFormat == QuantFormat::kInt8
                                ? __ldg(reinterpret_cast<const float*>(scales) + col)
                                : tensor_scale;
        c[mm * n + col] = sum * scale;
      }
      __syncthreads();
    }
  }
}

template <QuantFormat kFormat, bool kSplit>
absl::Status LaunchForFormat(int m_tiles, dim3 grid, const __half* hi, const __half* lo,
                             int64_t kp, const DeviceQuantizedWeight& b, int64_t m, float* c,
                             cudaStream_t stream) {
  const auto* data = static_cast<const uint8_t*>(b.data);
  const auto* scales = static_cast<const uint8_t*>(b.scales);
  switch (m_tiles) {
    case 1:
      SkinnyKernel<kFormat, 1, kSplit><<<grid, kWarps * 32, 0, stream>>>(
          hi, lo, kp, data, scales, b.tensor_scale, b.n, b.k, m, c);
      break;
    case 2:
      SkinnyKernel<kFormat, 2, kSplit><<<grid, kWarps * 32, 0, stream>>>(
          hi, lo, kp, data, scales, b.tensor_scale, b.n, b.k, m, c);
      break;
    case 3:
      SkinnyKernel<kFormat, 3, kSplit><<<grid, kWarps * 32, 0, stream>>>(
          hi, lo, kp, data, scales, b.tensor_scale, b.n, b.k, m, c);
      break;
    default:
      SkinnyKernel<kFormat, 4, kSplit><<<grid, kWarps * 32, 0, stream>>>(
          hi, lo, kp, data, scales, b.tensor_scale, b.n, b.k, m, c);
      break;
  }
  RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
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
  const dim3 grid(static_cast<unsigned>((b.n + kRows - 1) / kRows));
  const int m_tiles = static_cast<int>(mp / 16);
  if (b.format == QuantFormat::kNvfp4) {
    return split ? LaunchForFormat<QuantFormat::kNvfp4, true>(m_tiles, grid, hi, lo, kp, b, m, c,
                                                              stream)
                 : LaunchForFormat<QuantFormat::kNvfp4, false>(m_tiles, grid, hi, lo, kp, b, m,
                                                               c, stream);
  }
  return split ? LaunchForFormat<QuantFormat::kInt8, true>(m_tiles, grid, hi, lo, kp, b, m, c,
                                                           stream)
               : LaunchForFormat<QuantFormat::kInt8, false>(m_tiles, grid, hi, lo, kp, b, m, c,
                                                            stream);
}

}  // namespace gemmd::gpu
