// The quantized operand formats of QuantizedMatmul, shared by the server,
// the client and the tests: quantize (client side), dequantize (server side, and the
// reference the quantized kernels are tested against), and the scalar codecs.
//
// Both operands are K-major matrices [rows, K] (A is [M, K], B is [N, K]).
// - INT8: symmetric, one FP32 scale per row: x = q * s, s = amax(row) / 127,
//   q = round-half-even(x / s) clamped to [-127, 127]. An all-zero row gets s = 1.
// - NVFP4: E2M1 elements (two per byte, even K index in the low nibble), one E4M3 scale
//   byte per 16 consecutive elements along K, one FP32 tensor scale g:
//   x = e2m1 * e4m3 * g, g = amax(tensor) / (448 * 6), block scale = e4m3(amax(block) / 6
//   / g), element = round-to-nearest-even of x / (scale * g) onto the E2M1 grid, clamped
//   to +-6. K % 16 == 0. An all-zero tensor gets g = 1, zero scales and zero codes.
// Quantizers reject NaN and infinite inputs (INVALID_ARGUMENT); the NVFP4 decoder
// rejects the NaN scale bytes 0x7F and 0xFF (INVALID_ARGUMENT). Pure functions;
// thread-safe.
#ifndef GEMMD_KERNELS_QUANT_FORMATS_H_
#define GEMMD_KERNELS_QUANT_FORMATS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemmd {

enum class QuantFormat : uint8_t { kInt8, kNvfp4 };
inline constexpr int kNumQuantFormats = 2;
const char* QuantFormatName(QuantFormat format);  // "INT8", "NVFP4"

inline constexpr int64_t kNvfp4BlockSize = 16;  // elements per E4M3 scale, along K
inline constexpr float kE4m3Max = 448.0f;

// Whether `scales` are scales the service accepts: INT8 row scales (little-endian FP32,
// whole floats) finite and >= 0; NVFP4 block scales E4M3 bytes that are neither NaN
// (0x7F, 0xFF) nor negative (quantizers never write a sign; one means the bytes are not
// scales). `first` is the index of the first scale in the tensor (a row for INT8, a
// byte for NVFP4, with `k` the tensor's K), so messages name the scale's place:
// "scales[3] is nan; ..." (INT8) or "NVFP4 block scale [row, block] is 0x7f, ...".
absl::Status CheckScaleBytes(QuantFormat format, const void* scales, int64_t bytes, int64_t k,
                             int64_t first);
inline constexpr float kE2m1Max = 6.0f;

struct Int8Matrix {
  int64_t rows = 0;
  int64_t cols = 0;              // K
  std::vector<int8_t> values;    // [rows, cols]
  std::vector<float> scales;     // [rows]
};

struct Nvfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;                   // K, a multiple of 16
  std::vector<uint8_t> packed;        // [rows, cols / 2]: two E2M1 codes per byte
  std::vector<uint8_t> block_scales;  // [rows, cols / 16]: E4M3 bytes
  float tensor_scale = 1.0f;
};

// A quantized weight B [n, k] laid out exactly as on the wire, wherever it lives (host
// memory for the CPU backend, device memory for the GPU kernels): INT8 n*k values + n
// FP32 row scales (as bytes, any alignment on the host); NVFP4 n*k/2 code bytes + n*k/16
// E4M3 scale bytes + the tensor scale (a host value).
struct PackedWeight {
  QuantFormat format = QuantFormat::kNvfp4;
  const void* data = nullptr;
  const void* scales = nullptr;
  float tensor_scale = 1.0f;
  int64_t n = 0;
  int64_t k = 0;
};

// Bytes each format takes for a [rows, cols] matrix (values + scales), as sent.
int64_t Int8Bytes(int64_t rows, int64_t cols);
int64_t Nvfp4Bytes(int64_t rows, int64_t cols);

// Scalar codecs.
float DecodeE2m1(uint8_t code);  // low 4 bits: 0..7 -> 0, 0.5, 1, 1.5, 2, 3, 4, 6; 8..15 negative
// Nearest E2M1 code to `x` (ties to the even code, i.e. mantissa bit 0), clamped to +-6.
uint8_t EncodeE2m1(float x);
// float8_e4m3fn: NaN for 0x7F and 0xFF.
float DecodeE4m3(uint8_t byte);
// Nearest E4M3 byte to x >= 0 (ties to even), clamped to 448; x must not be NaN.
uint8_t EncodeE4m3(float x);

absl::StatusOr<Int8Matrix> QuantizeInt8(const float* x, int64_t rows, int64_t cols);
// out: rows * cols floats.
void DequantizeInt8(const Int8Matrix& m, float* out);
void DequantizeInt8(const int8_t* values, const float* scales, int64_t rows, int64_t cols,
                    float* out);

absl::StatusOr<Nvfp4Matrix> QuantizeNvfp4(const float* x, int64_t rows, int64_t cols);
// out: rows * cols floats. INVALID_ARGUMENT for a NaN scale byte or tensor scale, or sizes
// that do not match rows and cols.
absl::Status DequantizeNvfp4(const Nvfp4Matrix& m, float* out);
// The same from raw buffers of the right sizes (rows*cols/2 and rows*cols/16 bytes).
absl::Status DequantizeNvfp4(const uint8_t* packed, const uint8_t* block_scales,
                             float tensor_scale, int64_t rows, int64_t cols, float* out);

// INVALID_ARGUMENT naming the first NaN scale byte (0x7F, 0xFF) among the rows*cols/16
// E4M3 block scales: what DequantizeNvfp4 reports, for paths that decode on the GPU.
absl::Status CheckNvfp4Scales(const uint8_t* block_scales, int64_t rows, int64_t cols);

}  // namespace gemmd

#endif  // GEMMD_KERNELS_QUANT_FORMATS_H_
