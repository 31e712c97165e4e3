// One accepted Matmul or QuantizedMatmul from admission to answer: the request object.
// It is the Job the scheduler runs, and it owns everything the job's operands point
// into (the received slices, the buffer its payloads were copied into, dequantized
// operands, and their memory reservations) until the executor has answered it and lets
// it go.
//
// Preparing it, from the bytes gRPC received: parsed by proto/wire (the tensors' bytes
// located in the slices, not copied), its payloads placed once (payload_placement.h),
// validated (every size checked before anything sized by the client is allocated), its
// kernel chosen once through the backend's catalogue (a forced one checked), its
// operands pointing at the placed payloads (or at buffers prepared here, for a
// QuantizedMatmul dequantized on the host).
//
// Errors: INVALID_ARGUMENT for bytes that are not the request message, and those of
// ValidateMatmul / ValidateQuantizedMatmul; FAILED_PRECONDITION for a kernel this server
// does not have or that cannot run the request; RESOURCE_EXHAUSTED for a message over
// --max_message_bytes or memory that would pass --max_inflight_bytes. Thread-safe.
#ifndef GEMMD_SERVER_RPC_GEMM_REQUEST_H_
#define GEMMD_SERVER_RPC_GEMM_REQUEST_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/quantized_operands.h"
#include "server/devices/host_copier.h"
#include "server/rpc/host_memory.h"
#include "server/scheduling/job.h"
#include "server/devices/kernel_catalogue.h"
#include "server/rpc/matmul_validation.h"
#include "server/rpc/tensor_refs.h"
#include "server/store/tensor_store.h"
#include "server/observability/metrics.h"

namespace gemmd {

// What preparing needs from the server.
struct GemmRequestContext {
  ValidationLimits limits;
  const KernelCatalogue* catalogue = nullptr;
  HostMemory* memory = nullptr;
  HostCopier* copier = nullptr;  // copies large payloads off the wire on several threads
  // The devices stage Matmul operands from the received pieces themselves
  // (Device::gathers_pieces), so those need not be made contiguous first.
  bool device_gathers_pieces = false;
  // Resident tensors (null: this server keeps none), and whether their memory is host
  // memory (Device::resident_in_host_memory).
  TensorStore* store = nullptr;
  bool resident_in_host_memory = true;
};

struct GemmRequest : Job {
  // The caller's tenant ("" without authentication): whose resident tensors it may use,
  // and who owns a C it keeps.
  std::string tenant;
  // The request as received (payloads used in place point into it) and the memory it
  // holds; let go as soon as nothing points into it.
  std::vector<grpc::Slice> wire;
  Reservation wire_reservation;
  // The payloads copied off the wire (null when all are used in place).
  std::unique_ptr<HostBuffer> payloads;
  // Set while preparing: C's shape, payload bytes in and out, and host work on the
  // operands before queueing (copying payloads off the wire, dequantizing), which
  // responses report as copy-in.
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
  // Resident operands, pinned until the request goes; and the tensor C is written into
  // when the request keeps C resident (committed to the store once the job succeeded).
  TensorRefs refs;
  std::shared_ptr<StoredTensor> kept_c;
};

// Prepares `request` from `received`, the bytes of a MatmulRequest (method kMatmul) or a
// QuantizedMatmulRequest, which it takes (leaving `received` empty). *label is set as
// soon as the request's precision (or weight format) is known, so a failure after
// validation still counts under it. operands.c_out is left null: the caller points it
// at the result buffer; unless C is kept resident (kept_c), which C goes to instead.
absl::Status PrepareRequest(const GemmRequestContext& context, RpcMethod method,
                            grpc::ByteBuffer* received, GemmRequest* request,
                            PrecisionLabel* label);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_REQUEST_H_
