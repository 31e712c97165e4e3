// One accepted Matmul or QuantizedMatmul from admission to answer: the request object.
// It is the Job the scheduler runs, and it owns everything the job's operands point
// into (the parsed message, dequantized operands and their memory reservations) until
// the executor has answered it and lets it go.
//
// Preparing it: validated (every size checked before anything sized by the client is
// allocated), its kernel chosen once through the backend's catalogue (a forced one
// checked), its host memory reserved, its operands pointing into the request (or into
// buffers prepared here, for a QuantizedMatmul dequantized on the host).
//
// Errors: those of ValidateMatmul / ValidateQuantizedMatmul; FAILED_PRECONDITION for a
// kernel this server does not have or that cannot run the request; RESOURCE_EXHAUSTED
// when the memory it needs would pass --max_inflight_bytes. Thread-safe.
#ifndef GEMMD_SERVER_RPC_GEMM_REQUEST_H_
#define GEMMD_SERVER_RPC_GEMM_REQUEST_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/quantized_operands.h"
#include "server/rpc/host_memory.h"
#include "server/scheduling/job.h"
#include "server/devices/kernel_catalogue.h"
#include "server/rpc/matmul_validation.h"
#include "server/observability/metrics.h"

namespace gemmd {

// What preparing needs from the server.
struct GemmRequestContext {
  ValidationLimits limits;
  const KernelCatalogue* catalogue = nullptr;
  HostMemory* memory = nullptr;
};

struct GemmRequest : Job {
  // The parsed request (a MatmulRequest or QuantizedMatmulRequest), which the operands
  // point into, and the memory it holds.
  std::unique_ptr<google::protobuf::Message> message;
  Reservation message_reservation;
  // Set while preparing: C's shape, payload bytes in and out, and host work on the
  // operands before queueing (dequantizing), which responses report as copy-in.
  std::vector<int64_t> output_shape;
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;  // C
  absl::Duration prepare;
  // Job::quantized points here for a QuantizedMatmul on a quantized kernel.
  QuantizedOperands packed;
  // Dequantized operands (the host path, or a quantized A for a kernel that reads it
  // dense) and their memory.
  std::unique_ptr<float[]> scratch;
  Reservation scratch_reservation;
};

// Prepares `request` from its message (a MatmulRequest / QuantizedMatmulRequest). *label
// is set as soon as the request's precision (or weight format) is known, so a failure
// after validation still counts under it. operands.c_out is left null: the caller points
// it at the result buffer.
absl::Status PrepareMatmul(const GemmRequestContext& context, GemmRequest* request,
                           PrecisionLabel* label);
absl::Status PrepareQuantizedMatmul(const GemmRequestContext& context, GemmRequest* request,
                                    PrecisionLabel* label);

// FAILED_PRECONDITION for a forced kernel name this server has under neither RPC, or one
// that belongs to the other RPC (a QuantizedMatmul kernel named in a Matmul); OK for ""
// and names the RPC can use. The message lists what there is (names are capped).
absl::Status CheckKernelName(const KernelCatalogue& catalogue, RpcMethod method,
                             std::string_view name);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_REQUEST_H_
