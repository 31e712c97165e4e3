// Decodes and validates a MatmulRequest into a GemmProblem whose operands point at the
// tensors' bytes (no copy). Every check happens before anything sized by client numbers
// is allocated; sizes are multiplied in 64 bits with overflow checks.
//
// Errors (absl codes, mapped to gRPC once at the edge):
//   INVALID_ARGUMENT    malformed tensor (bytes != shape x dtype), bad rank, dims <= 0,
//                       K mismatch, unknown enum, dtype not accepted, beta != 0 without c
//   RESOURCE_EXHAUSTED  an operand or the result over max_elements, or a result larger
//                       than a response may be (max_message_bytes)
// Thread-safe (pure function).
#ifndef GEMMD_SERVER_RPC_MATMUL_VALIDATION_H_
#define GEMMD_SERVER_RPC_MATMUL_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

struct ValidationLimits {
  int64_t max_message_bytes = 0;
  int64_t max_elements = 0;  // per operand, the result included
};

// Shared by the Matmul and QuantizedMatmul validators. Room for a response's non-tensor
// fields when checking the result against the message limit:
inline constexpr int64_t kResponseOverheadBytes = 4096;
// A client's shape as messages show it (ShapeText of client_text.h).
std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape);

struct ValidatedMatmul {
  GemmProblem problem;
  GemmOperands operands;  // a, b, c_in point into the request; c_out is left null
  std::vector<int64_t> output_shape;
  int64_t output_bytes = 0;
  int64_t input_bytes = 0;  // operand payload received (a, b, and c when used)
  std::string kernel;       // forced kernel name, empty = let the server choose
};

// The tensors' bytes, apart from the message (proto/wire/gemm_wire.h parses them so).
struct MatmulPayloads {
  absl::string_view a, b, c;
};

// Which operands are resident tensors (exempt from max_elements: the tensor store's cap
// bounds them), and whether C stays resident (then it need not fit a response).
struct MatmulResidency {
  bool a = false, b = false, c = false;
  bool keep_c = false;
};

// `request`'s tensors' own data fields are ignored: their bytes are `payloads`.
absl::StatusOr<ValidatedMatmul> ValidateMatmul(const gemm::v1::MatmulRequest& request,
                                               const MatmulPayloads& payloads,
                                               const ValidationLimits& limits,
                                               MatmulResidency residency = {});
// A whole parsed message (its tensors' data fields are the payloads).
absl::StatusOr<ValidatedMatmul> ValidateMatmul(const gemm::v1::MatmulRequest& request,
                                               const ValidationLimits& limits);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_MATMUL_VALIDATION_H_
