// Builds the MatmulRequest a command sends (random operands or .npy files) together with
// the GemmProblem it describes, so results can be checked against the FP64 reference.
#ifndef GEMMD_CLIENT_CLI_MATMUL_INPUTS_H_
#define GEMMD_CLIENT_CLI_MATMUL_INPUTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "client_cli/cli_options.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"

namespace gemmd {

struct MatmulInputs {
  gemm::v1::MatmulRequest request;
  GemmProblem problem;        // precision resolved as the server resolves AUTO
  GemmOperands operands;      // point into `request` (c_out null)
  int64_t payload_bytes = 0;  // tensor bytes in the request
};

// INVALID_ARGUMENT for bad flags or .npy files that do not fit together.
absl::StatusOr<std::unique_ptr<MatmulInputs>> BuildMatmulInputs(const CliOptions& options);

// Relative Frobenius error of the response's C (`info` as the server described it, `c`
// its bytes) against the FP64 reference of `inputs`.
absl::StatusOr<double> VerifyResult(const MatmulInputs& inputs,
                                    const gemm::v1::MatmulResponse& info, absl::string_view c);

// The documented tolerance (docs/ARCHITECTURE.md, "Numerics") for a problem's precision and dtypes.
double ToleranceFor(const GemmProblem& problem);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_CLI_MATMUL_INPUTS_H_
