// Builds the MatmulRequest a command sends (random operands or .npy files) together with
// the GemmProblem it describes, so results can be checked against the FP64 reference.
#ifndef GEMMD_CLIENT_CLI_MATMUL_INPUTS_H_
#define GEMMD_CLIENT_CLI_MATMUL_INPUTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client_cli/cli_options.h"
#include "client_cli/resident_operands.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

struct MatmulInputs {
  // Operands inline, or by handle (a_ref, b_ref, c_ref) for --a/--b/--c @HANDLE.
  gemm::v1::MatmulRequest request;
  GemmProblem problem;        // precision resolved as the server resolves AUTO
  // Point into `request`, or into `resident_data` for a downloaded resident operand;
  // null for one by handle that was not downloaded (c_out null).
  GemmOperands operands;
  int64_t payload_bytes = 0;  // tensor bytes in the request
  std::string resident_data[3];  // A, B, C downloaded (--verify)
  bool has_reference() const {
    return operands.a != nullptr && operands.b != nullptr &&
           (!request.has_c_ref() || operands.c_in != nullptr);
  }
};

// INVALID_ARGUMENT for bad flags or .npy files that do not fit together. Operands given
// as @HANDLE are looked up in `resident` (their shapes; their bytes too with --verify);
// without one (null) a handle is INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<MatmulInputs>> BuildMatmulInputs(
    const CliOptions& options, ResidentLookup* resident = nullptr);

// Relative Frobenius error of the response's C (`info` as the server described it, `c`
// its bytes) against the FP64 reference of `inputs`.
absl::StatusOr<double> VerifyResult(const MatmulInputs& inputs,
                                    const gemm::v1::MatmulResponse& info, absl::string_view c);

// The documented tolerance (docs/ARCHITECTURE.md, "Numerics") for a problem's precision and dtypes.
double ToleranceFor(const GemmProblem& problem);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_MATMUL_INPUTS_H_
