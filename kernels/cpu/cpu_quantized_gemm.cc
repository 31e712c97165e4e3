#include "kernels/cpu/cpu_quantized_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_gemm.h"

namespace gemmd {
namespace {

// Rows of B per tile: about 1M floats (4 MB), so a tile is written and read back while
// it is still in cache (64 or more rows, the SGEMM's width, up to K = 16384; for longer
// rows fewer, down to one, so the tile never grows past one row or 4 MB).
int64_t TileRows(int64_t n, int64_t k) {
  int64_t rows = std::max<int64_t>(1, (int64_t{1} << 20) / k);
  if (rows >= 16) rows = rows / 16 * 16;
  return std::min(n, rows);
}

// Rows [r0, r0 + rows) of B, dequantized into `out` ([rows, k]).
absl::Status DequantizeRows(const PackedWeight& b, int64_t r0, int64_t rows, float* out) {
  const auto* data = static_cast<const uint8_t*>(b.data);
  const auto* scales = static_cast<const uint8_t*>(b.scales);
  if (b.format == QuantFormat::kInt8) {
    // The scales come as bytes with no alignment promise: copy them out.
    std::vector<float> row_scales(static_cast<size_t>(rows));
    std::memcpy(row_scales.data(), scales + r0 * 4, row_scales.size() * sizeof(float));
    DequantizeInt8(reinterpret_cast<const int8_t*>(data) + r0 * b.k, row_scales.data(), rows, b.k,
                   out);
    return absl::OkStatus();
  }
  return DequantizeNvfp4(data + r0 * b.k / 2, scales + r0 * (b.k / kNvfp4BlockSize), b.tensor_scale,
                         rows, b.k, out);
}

}  // namespace

absl::Status CpuWeightOnlyGemm(const void* a, DataType a_type, int64_t m, const PackedWeight& b,
                               float* c) {
  if (a_type != DataType::kFloat32 && a_type != DataType::kFloat16 &&
      a_type != DataType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight-only quantized GEMM takes FLOAT32, FLOAT16 or BFLOAT16 activations, not ",
        DataTypeName(a_type)));
  }
  constexpr int64_t kMaxDim = std::numeric_limits<int>::max();
  if (m <= 0 || b.n <= 0 || b.k <= 0 || m > kMaxDim || b.n > kMaxDim || b.k > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight-only quantized GEMM: dimensions [", m, ", ", b.n, ", ", b.k,
                     "] must be positive and fit the CPU backend's 32-bit BLAS indices"));
  }
  if (b.format == QuantFormat::kNvfp4 && b.k % kNvfp4BlockSize != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NVFP4 needs K to be a multiple of 16; K is ", b.k));
  }
  if (a == nullptr || c == nullptr || b.data == nullptr || b.scales == nullptr) {
    return absl::InvalidArgumentError("weight-only quantized GEMM: null pointer");
  }
  // NaN scales are refused up front, with B's own row and block (a tile would count
  // rows from its start), before any of C is written.
  if (b.format == QuantFormat::kNvfp4) {
    if (absl::Status s = CheckNvfp4Scales(static_cast<const uint8_t*>(b.scales), b.n, b.k);
        !s.ok()) {
      return s;
    }
  }

  // A as FP32: in place when it already is and is aligned, else widened once.
  std::vector<float> a_scratch;
  const float* a32 = static_cast<const float*>(a);
  if (a_type != DataType::kFloat32 || reinterpret_cast<uintptr_t>(a) % alignof(float) != 0) {
    a_scratch.resize(static_cast<size_t>(m * b.k));
    WidenToFloat(a, a_type, m * b.k, a_scratch.data());
    a32 = a_scratch.data();
  }

  const int64_t tile_rows = TileRows(b.n, b.k);
  std::vector<float> tile(static_cast<size_t>(tile_rows * b.k));
  for (int64_t r0 = 0; r0 < b.n; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, b.n - r0);
    if (absl::Status s = DequantizeRows(b, r0, rows, tile.data()); !s.ok()) return s;
    // C[:, r0:r0+rows] = A * tile^T, written in place (ldc = n).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                static_cast<int>(rows), static_cast<int>(b.k), 1.0f, a32, static_cast<int>(b.k),
                tile.data(), static_cast<int>(b.k), 0.0f, c + r0, static_cast<int>(b.n));
  }
  return absl::OkStatus();
}

}  // namespace gemmd
