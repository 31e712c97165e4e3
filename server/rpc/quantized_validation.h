// Decodes and validates a QuantizedMatmulRequest (formats: kernels/quant_formats.h): shapes, formats, and
// every byte count against shape and format, before anything sized by the client is
// allocated; then dequantizes the operands to FP32 for the FP32 GEMM path.
//
// Errors: INVALID_ARGUMENT (missing operand, bad rank or dims, K mismatch, unknown
// format, data or scales of the wrong length, NVFP4 K not a multiple of 16, non-finite
// or negative INT8 scales, a tensor scale not > 0, NaN or negative E4M3 block scale
// bytes); RESOURCE_EXHAUSTED (an operand or the result over max_elements, a result over
// max_message_bytes).
// Thread-safe (pure functions).
#ifndef GEMMD_SERVER_RPC_QUANTIZED_VALIDATION_H_
#define GEMMD_SERVER_RPC_QUANTIZED_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"
#include "kernels/quant_formats.h"
#include "server/rpc/matmul_validation.h"
#include "kernels/quantized_operands.h"
#include "proto/wire/gemm_wire.h"

namespace gemmd {

struct ValidatedQuantized {
  int64_t m = 0, n = 0, k = 0;
  std::optional<QuantFormat> a_format;  // nullopt: A is dense (weight-only quantization)
  DataType a_dense_type = DataType::kFloat32;
  QuantFormat b_format = QuantFormat::kInt8;
  std::string kernel;  // forced kernel name, empty = the server chooses
  int64_t input_bytes = 0;   // payload bytes received (data + scales)
  int64_t output_bytes = 0;  // C, FP32
};

// Operands that are resident tensors: their scales were checked at upload and are not
// read again (they may be in device memory).
struct ResidentOperands {
  bool a = false, b = false;
};

// `request`'s data and scales fields are ignored: their bytes are `payloads`
// (proto/wire/gemm_wire.h parses them so).
absl::StatusOr<ValidatedQuantized> ValidateQuantizedMatmul(
    const gemm::v1::QuantizedMatmulRequest& request, const wire::QuantizedPayloads& payloads,
    const ValidationLimits& limits, ResidentOperands resident = {});
// A whole parsed message (its data and scales fields are the payloads).
absl::StatusOr<ValidatedQuantized> ValidateQuantizedMatmul(
    const gemm::v1::QuantizedMatmulRequest& request, const ValidationLimits& limits);
wire::QuantizedPayloads PayloadsOf(const gemm::v1::QuantizedMatmulRequest& request);

// Writes A [m, k] and B [n, k] of a validated request as FP32 (a_out: m*k floats, b_out:
// n*k floats). INVALID_ARGUMENT for a NaN E4M3 scale byte.
absl::Status DequantizeOperands(const gemm::v1::QuantizedMatmulRequest& request,
                                const ValidatedQuantized& v, const wire::QuantizedPayloads& payloads,
                                float* a_out, float* b_out);

// The packed operands of a validated request, for a device that decodes them itself
// (pointing at `payloads`).
QuantizedOperands PackedOperands(const gemm::v1::QuantizedMatmulRequest& request,
                                 const ValidatedQuantized& v, const wire::QuantizedPayloads& payloads);


}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_QUANTIZED_VALIDATION_H_
