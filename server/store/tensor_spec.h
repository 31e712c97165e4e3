// What a resident tensor is, in plain C++ (the service converts gemm.v1.TensorHeader to
// it): a dense tensor of a DataType, or a quantized one (kernels/quant_formats.h), and
// the byte counts that follow from it. Pure functions; thread-safe.
#ifndef GEMMD_SERVER_STORE_TENSOR_SPEC_H_
#define GEMMD_SERVER_STORE_TENSOR_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"

namespace gemmd {

struct TensorSpec {
  // Dense: [rows, cols] or [batch, rows, cols]. Quantized: [rows, K].
  std::vector<int64_t> shape;
  bool quantized = false;
  DataType dtype = DataType::kFloat32;       // dense
  QuantFormat format = QuantFormat::kInt8;   // quantized
  float tensor_scale = 1.0f;                 // NVFP4
};

// Largest resident tensor the store takes (bytes), whatever the cap: 2^46, far above any
// device, so that every size below fits int64 arithmetic with room to spare.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 46;

// INVALID_ARGUMENT, saying what is wrong and what is expected, for a rank other than 2
// or 3 (2 for quantized), a dimension < 1, a size over kMaxTensorBytes, an NVFP4 K not a
// multiple of 16, or an NVFP4 tensor scale that is not finite and > 0.
absl::Status ValidateSpec(const TensorSpec& spec);

// For a valid spec: the rows parts split (every dimension but the last), and the bytes
// of data and scales per row and in all.
int64_t Rows(const TensorSpec& spec);
int64_t RowDataBytes(const TensorSpec& spec);
int64_t RowScaleBytes(const TensorSpec& spec);  // 0 for dense tensors
int64_t DataBytes(const TensorSpec& spec);
int64_t ScaleBytes(const TensorSpec& spec);
// Where the scales start in the tensor's memory (after the data, 256-byte aligned), and
// the memory the whole tensor takes.
int64_t ScalesOffset(const TensorSpec& spec);
int64_t StoredBytes(const TensorSpec& spec);

// "FLOAT32 [4096, 4096]" or "NVFP4 [8192, 8192]".
std::string SpecText(const TensorSpec& spec);

// Checks scale bytes as they arrive in pieces of any size (an INT8 scale may be split
// between two chunks): the same checks as QuantizedMatmul's validation.
class ScaleChecker {
 public:
  ScaleChecker() = default;
  ScaleChecker(const TensorSpec& spec, int64_t first_scale_byte)
      : spec_(spec), next_(first_scale_byte) {}
  absl::Status Check(absl::string_view bytes);

 private:
  TensorSpec spec_;
  int64_t next_ = 0;  // byte index (in the whole tensor's scales) of the next byte
  char carry_[4] = {};
  int carried_ = 0;
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_STORE_TENSOR_SPEC_H_
