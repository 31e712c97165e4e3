// Turns a parsed Matmul or QuantizedMatmul request into the GEMM the executor runs:
// validated (every size checked before anything sized by the client is allocated), its
// kernel checked against what this server has, its host memory reserved, and its operands
// pointing into the request (or into buffers this prepares, for a QuantizedMatmul that
// is dequantized on the host).
//
// Errors: those of ValidateMatmul / ValidateQuantizedMatmul; FAILED_PRECONDITION for a
// kernel this server does not have or that cannot run the request; RESOURCE_EXHAUSTED
// when the memory it needs would pass --max_inflight_bytes. Thread-safe.
#ifndef GEMMD_SERVER_GEMM_REQUEST_H_
#define GEMMD_SERVER_GEMM_REQUEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/gemm_problem.h"
#include "server/device.h"
#include "server/host_memory.h"
#include "server/matmul_validation.h"
#include "server/metrics.h"
#include "server/quantized_operands.h"

namespace gemmd {

// What preparing needs from the server.
struct GemmRequestContext {
  ValidationLimits limits;
  const Device* device = nullptr;  // every device of a server is of one kind: any one answers
  HostMemory* memory = nullptr;
};

struct PreparedGemm {
  PrecisionLabel label = PrecisionLabel::None();
  GemmProblem problem;
  GemmOperands operands;  // c_out left null: the caller points it at the result buffer
  // QuantizedMatmul served from the packed operands (Device::SelectQuantizedKernel).
  std::shared_ptr<const QuantizedOperands> quantized;
  std::string forced_kernel;
  std::vector<int64_t> output_shape;
  int64_t input_bytes = 0;   // operand payload received
  int64_t output_bytes = 0;  // C
  // Host work on the operands before queueing (dequantizing, checking scales): reported
  // as copy-in.
  absl::Duration prepare;
  // Buffers the operands point into besides the request (dequantized operands), and the
  // memory they hold.
  std::shared_ptr<void> scratch;
  Reservation scratch_reservation;
};

// *label is set as soon as the request's precision (or weight format) is known, so a
// failure after validation still counts under it.
absl::StatusOr<PreparedGemm> PrepareMatmul(const gemm::v1::MatmulRequest& request,
                                           const GemmRequestContext& context,
                                           PrecisionLabel* label);
absl::StatusOr<PreparedGemm> PrepareQuantizedMatmul(
    const gemm::v1::QuantizedMatmulRequest& request, const GemmRequestContext& context,
    PrecisionLabel* label);

// FAILED_PRECONDITION for a forced kernel name this server has under neither RPC, or one
// that belongs to the other RPC (a QuantizedMatmul kernel named in a Matmul); OK for ""
// and names the RPC can use. The message lists what there is (names are capped).
absl::Status CheckKernelName(const Device& device, RpcMethod method, const std::string& name);

}  // namespace gemmd

#endif  // GEMMD_SERVER_GEMM_REQUEST_H_
