// What `gemm-cli quantized` sends and how it checks the answer: FP32 operands (random
// N(0,1), or .npy files A [M,K] and B [N,K]), quantized on the client to INT8 or NVFP4
// (B only with --weight_only; A then goes as --dtype), the request, the byte counts, and
// the two errors of a result. Pure functions (no RPC), so they are unit-tested.
#ifndef GEMMD_CLIENT_CLI_QUANTIZED_INPUTS_H_
#define GEMMD_CLIENT_CLI_QUANTIZED_INPUTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client_cli/cli_options.h"
#include "client_cli/resident_operands.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/quant_formats.h"

namespace gemmd {

struct QuantizedInputs {
  int64_t m = 0, n = 0, k = 0;
  QuantFormat format = QuantFormat::kNvfp4;
  bool weight_only = false;
  // The FP32 originals; empty when an operand is resident (--a/--b @HANDLE): only its
  // quantized form exists.
  std::vector<float> a, b;
  // What the server multiplies; empty for a resident operand not downloaded.
  std::vector<float> a_dequantized, b_dequantized;
  // Operands inline, or by handle (a_ref, b_ref).
  gemm::v1::QuantizedMatmulRequest request;
  int64_t sent_bytes = 0;  // operand payload of the request (data + scales)
  int64_t b_bytes = 0;     // B's data + scales, inline or resident
};

// INVALID_ARGUMENT for bad flags (--format, shapes, K % 16 for NVFP4, NaN/Inf inputs),
// NOT_FOUND / INVALID_ARGUMENT for unreadable .npy files. --a/--b @HANDLE are looked up
// in `resident` (downloaded with --verify); B must be a quantized tensor, A quantized or
// dense (weight-only); the other operand may then be random (--m / --n, K the handle's).
absl::StatusOr<std::unique_ptr<QuantizedInputs>> BuildQuantizedInputs(
    const CliOptions& options, ResidentLookup* resident = nullptr);

// Quantizes x [rows, k] to `format`: the tensor as sent, and its dequantized values.
absl::Status QuantizeMatrix(QuantFormat format, const std::vector<float>& x, int64_t rows,
                            int64_t k, gemm::v1::QuantizedTensor* quantized,
                            std::vector<float>* dequantized);
// A 2-D [rows, cols] .npy file (FLOAT32, FLOAT16 or BFLOAT16) as FP32 values.
absl::StatusOr<std::vector<float>> LoadMatrix(const std::string& path, int64_t* rows,
                                              int64_t* cols);

struct QuantizedErrors {
  double kernel = 0;  // vs FP64 on the dequantized operands: the service's error
  double format = 0;  // vs FP64 on the FP32 originals: what quantizing cost
  bool has_format = true;  // false when an operand is resident (no originals here)
};
// `c` is the response's FP32 [M, N] bytes. INVALID_ARGUMENT when its size is wrong.
absl::StatusOr<QuantizedErrors> QuantizedResultErrors(const QuantizedInputs& inputs,
                                                      absl::string_view c);

// The kernel error the CLI accepts: the FP32 path on exact dequantized values.
inline constexpr double kQuantizedKernelTolerance = 1e-5;

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_QUANTIZED_INPUTS_H_
