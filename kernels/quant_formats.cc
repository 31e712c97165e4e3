#include "kernels/quant_formats.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemmd {
namespace {

constexpr float kE2m1Grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
// All 16 codes, sign included (DecodeE2m1 without the branch).
constexpr float kE2m1Signed[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

absl::Status CheckFinite(const float* x, int64_t count, const char* format) {
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat("cannot quantize to ", format, ": element ",
                                                     i, " is ", x[i], " (NaN and Inf have no ",
                                                     format, " encoding)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckShape(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a quantized matrix needs rows and cols > 0, got [", rows, ", ", cols, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* QuantFormatName(QuantFormat format) {
  return format == QuantFormat::kInt8 ? "INT8" : "NVFP4";
}

int64_t Int8Bytes(int64_t rows, int64_t cols) { return rows * cols + rows * 4; }

int64_t Nvfp4Bytes(int64_t rows, int64_t cols) {
  return rows * cols / 2 + rows * (cols / kNvfp4BlockSize) + 4;
}

float DecodeE2m1(uint8_t code) {
  const float magnitude = kE2m1Grid[code & 7];
  return (code & 8) != 0 ? -magnitude : magnitude;
}

uint8_t EncodeE2m1(float x) {
  const float a = std::fabs(x);
  uint8_t code = 7;
  if (a < kE2m1Max) {
    int i = 0;
    while (a >= kE2m1Grid[i + 1]) ++i;  // kE2m1Grid[i] <= a < kE2m1Grid[i + 1]
    const float mid = 0.5f * (kE2m1Grid[i] + kE2m1Grid[i + 1]);
    if (a < mid) {
      code = static_cast<uint8_t>(i);
    } else if (a > mid) {
      code = static_cast<uint8_t>(i + 1);
    } else {
      code = static_cast<uint8_t>(i % 2 == 0 ? i : i + 1);  // tie: the even code
    }
  }
  return std::signbit(x) ? static_cast<uint8_t>(code | 8) : code;
}

float DecodeE4m3(uint8_t byte) {
  const int exponent = (byte >> 3) & 0xF;
  const int mantissa = byte & 7;
  if (exponent == 0xF && mantissa == 7) return std::nanf("");
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)  // m/8 * 2^-6
                              : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f,
                                           exponent - 7);
  return (byte & 0x80) != 0 ? -magnitude : magnitude;
}

uint8_t EncodeE4m3(float x) {
  if (!(x > 0.0f)) return 0;           // zero (and negatives: scales are never negative)
  if (x >= kE4m3Max) return 0x7E;      // clamp to 448
  const double v = x;
  if (v < std::ldexp(1.0, -6)) {
    // Subnormals step by 2^-9; a count of 8 is byte 0x08, the smallest normal (2^-6).
    return static_cast<uint8_t>(std::nearbyint(std::ldexp(v, 9)));
  }
  int e = 0;
  const double f = std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1)
  int exponent = e - 1 + 7;            // biased
  double mantissa = std::nearbyint((2.0 * f - 1.0) * 8.0);
  if (mantissa == 8.0) {
    mantissa = 0.0;
    ++exponent;
  }
  const int byte = (exponent << 3) | static_cast<int>(mantissa);
  return static_cast<uint8_t>(std::min(byte, 0x7E));
}

absl::StatusOr<Int8Matrix> QuantizeInt8(const float* x, int64_t rows, int64_t cols) {
  if (absl::Status s = CheckShape(rows, cols); !s.ok()) return s;
  if (absl::Status s = CheckFinite(x, rows * cols, "INT8"); !s.ok()) return s;
  Int8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.values.resize(static_cast<size_t>(rows * cols));
  m.scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float amax = 0.0f;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
    m.scales[r] = scale;
    for (int64_t k = 0; k < cols; ++k) {
      const float q = std::nearbyint(row[k] / scale);
      m.values[r * cols + k] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
  return m;
}

void DequantizeInt8(const int8_t* values, const float* scales, int64_t rows, int64_t cols,
                    float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      out[r * cols + k] = static_cast<float>(values[r * cols + k]) * scales[r];
    }
  }
}

void DequantizeInt8(const Int8Matrix& m, float* out) {
  DequantizeInt8(m.values.data(), m.scales.data(), m.rows, m.cols, out);
}

absl::StatusOr<Nvfp4Matrix> QuantizeNvfp4(const float* x, int64_t rows, int64_t cols) {
  if (absl::Status s = CheckShape(rows, cols); !s.ok()) return s;
  if (cols % kNvfp4BlockSize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NVFP4 needs K to be a multiple of 16 (one scale per 16 values along K); K is ", cols,
        ": pad K with zeros to ", (cols + 15) / 16 * 16));
  }
  if (absl::Status s = CheckFinite(x, rows * cols, "NVFP4"); !s.ok()) return s;
  float amax = 0.0f;
  for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(x[i]));
  Nvfp4Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.tensor_scale = amax > 0.0f ? amax / (kE4m3Max * kE2m1Max) : 1.0f;
  const float g = m.tensor_scale;
  m.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
  m.block_scales.assign(static_cast<size_t>(rows * (cols / kNvfp4BlockSize)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / kNvfp4BlockSize; ++b) {
      const float* block = x + r * cols + b * kNvfp4BlockSize;
      float block_amax = 0.0f;
      for (int64_t i = 0; i < kNvfp4BlockSize; ++i) {
        block_amax = std::max(block_amax, std::fabs(block[i]));
      }
      const uint8_t scale_byte = EncodeE4m3(block_amax / kE2m1Max / g);
      m.block_scales[r * (cols / kNvfp4BlockSize) + b] = scale_byte;
      const float denominator = DecodeE4m3(scale_byte) * g;
      for (int64_t i = 0; i < kNvfp4BlockSize; ++i) {
        const uint8_t code = denominator > 0.0f ? EncodeE2m1(block[i] / denominator) : 0;
        const int64_t k = b * kNvfp4BlockSize + i;
        uint8_t& byte = m.packed[(r * cols + k) / 2];
        byte |= (k % 2 == 0) ? code : static_cast<uint8_t>(code << 4);
      }
    }
  }
  return m;
}

absl::Status DequantizeNvfp4(const Nvfp4Matrix& m, float* out) {
  if (m.cols % kNvfp4BlockSize != 0 ||
      static_cast<int64_t>(m.packed.size()) != m.rows * m.cols / 2 ||
      static_cast<int64_t>(m.block_scales.size()) != m.rows * (m.cols / kNvfp4BlockSize)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NVFP4 [", m.rows, ", ", m.cols, "] needs ", m.rows * m.cols / 2, " data bytes and ",
        m.rows * (m.cols / kNvfp4BlockSize), " scale bytes; got ", m.packed.size(), " and ",
        m.block_scales.size()));
  }
  return DequantizeNvfp4(m.packed.data(), m.block_scales.data(), m.tensor_scale, m.rows, m.cols,
                         out);
}

namespace {

absl::Status NanScaleError(int64_t row, int64_t block, uint8_t byte) {
  return absl::InvalidArgumentError(
      absl::StrCat("NVFP4 block scale [", row, ", ", block, "] is 0x", absl::Hex(byte),
                   ", a NaN in E4M3 (0x7F and 0xFF are not scales)"));
}

}  // namespace

absl::Status CheckNvfp4Scales(const uint8_t* block_scales, int64_t rows, int64_t cols) {
  const int64_t blocks_per_row = cols / kNvfp4BlockSize;
  for (int64_t i = 0; i < rows * blocks_per_row; ++i) {
    if ((block_scales[i] & 0x7F) == 0x7F) {
      return NanScaleError(i / blocks_per_row, i % blocks_per_row, block_scales[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeNvfp4(const uint8_t* packed, const uint8_t* block_scales,
                             float tensor_scale, int64_t rows, int64_t cols, float* out) {
  if (!std::isfinite(tensor_scale)) {
    return absl::InvalidArgumentError("NVFP4 tensor scale is not finite");
  }
  const int64_t blocks_per_row = cols / kNvfp4BlockSize;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks_per_row; ++b) {
      const uint8_t scale_byte = block_scales[r * blocks_per_row + b];
      const float scale = DecodeE4m3(scale_byte);
      if (std::isnan(scale)) return NanScaleError(r, b, scale_byte);
      // K % 16 == 0, so a block starts on a byte: 8 bytes, two codes each (even index
      // in the low nibble). e2m1 * e4m3 is exact in float; the tensor scale adds the
      // only rounding.
      const uint8_t* bytes = packed + (r * cols + b * kNvfp4BlockSize) / 2;
      float* dst = out + r * cols + b * kNvfp4BlockSize;
      for (int64_t i = 0; i < kNvfp4BlockSize / 2; ++i) {
        dst[2 * i] = kE2m1Signed[bytes[i] & 0xF] * scale * tensor_scale;
        dst[2 * i + 1] = kE2m1Signed[bytes[i] >> 4] * scale * tensor_scale;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckScaleBytes(QuantFormat format, const void* scales, int64_t bytes, int64_t k,
                             int64_t first) {
  const auto* p = static_cast<const uint8_t*>(scales);
  if (format == QuantFormat::kInt8) {
    for (int64_t i = 0; i + 4 <= bytes; i += 4) {
      float s;
      std::memcpy(&s, p + i, 4);
      // amax / 127 is never negative; a negative scale would flip the row's sign.
      if (!std::isfinite(s) || s < 0.0f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "scales[", first + i / 4, "] is ", s, "; INT8 scales must be finite and >= 0"));
      }
    }
    return absl::OkStatus();
  }
  const int64_t blocks_per_row = k / kNvfp4BlockSize;
  for (int64_t i = 0; i < bytes; ++i) {
    const uint8_t byte = p[i];
    if (byte < 0x7F) continue;
    const int64_t row = (first + i) / blocks_per_row;
    const int64_t block = (first + i) % blocks_per_row;
    if (byte == 0x7F || byte == 0xFF) {
      return absl::InvalidArgumentError(
          absl::StrCat("NVFP4 block scale [", row, ", ", block, "] is 0x", absl::Hex(byte),
                       ", a NaN in E4M3 (0x7F and 0xFF are not scales)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "NVFP4 block scale [", row, ", ", block, "] is 0x", absl::Hex(byte),
        ", which has the sign bit set; block scales are unsigned (0x00-0x7E)"));
  }
  return absl::OkStatus();
}

}  // namespace gemmd
