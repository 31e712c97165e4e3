// One accepted Matmul or QuantizedMatmul from admission to answer: the request object.
// It is the Job the scheduler runs, and it owns everything the job's operands point
// into (the received slices, the buffer its payloads were copied into, dequantized
// operands, and their memory reservations) until the executor has answered it and lets
// it go.
//
// Where an operand's bytes are, in the words every phase uses:
//   received     the request as gRPC delivered it: its slices (GemmRequest::received)
//   located      a payload's runs within the received bytes (proto/wire)
//   placed       where the device reads a payload from the host: in place (a view into
//                the received bytes), left in pieces for a device that gathers them
//                (Job::pieces), or copied once into one buffer (GemmRequest::copied)
//   resident     a tensor of the store named by handle (GemmRequest::resident_refs),
//                read where it is (Job::resident when that is device memory)
//   packed       a QuantizedMatmul's quantized operands as its kernel reads them
//   dequantized  FP32 operands made on the host for a path that needs them
//
// Preparing it runs these phases in order (request_phases.h; each returns a value and
// has its own tests, tests/gemm_request_test.cc):
//   TakeReceived   the message's size checked against --max_message_bytes and reserved;
//                  its slices taken (no copy)
//   Locate         proto/wire parses the head and locates each payload, inline or in a
//                  shared-memory region (region_payloads.h)
//   Bind           resident tensors pinned; the device they are on
//   Validate       every size checked before anything sized by the client is allocated
//                  (a QuantizedMatmul's scale bytes are read, so its payloads are placed
//                  first)
//   Choose         KernelCatalogue::Choose: the kernel and a QuantizedMatmul's path
//   Place          payloads placed; a QuantizedMatmul dequantized on the host where its
//                  path says so; a C kept resident allocated
// and last SetResultDestination, the one place C's destination (c_out) is set.
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
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "kernels/quantized_operands.h"
#include "proto/wire/wire_format.h"
#include "server/devices/host_copier.h"
#include "server/devices/kernel_catalogue.h"
#include "server/observability/metrics.h"
#include "server/regions/region_table.h"
#include "server/rpc/host_memory.h"
#include "server/rpc/matmul_validation.h"
#include "server/rpc/tensor_refs.h"
#include "server/scheduling/job.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// A received message's bytes, held as gRPC's slices (references, no copy):
// TakeReceived (request_phases.h) makes one.
struct Received {
  std::vector<grpc::Slice> slices;
  Reservation reservation;  // the bytes, against --max_inflight_bytes
  // The request message's bytes in order, for Locate: all of the slices' bytes, or the
  // part of them that is the request when it came inside another message (a
  // MatmulStream's StreamRequest).
  wire::ByteRuns runs;
};

// What preparing needs from the server.
struct GemmRequestContext {
  ValidationLimits limits;
  const KernelCatalogue* catalogue = nullptr;
  HostMemory* memory = nullptr;
  HostCopier* copier = nullptr;  // copies large payloads on several threads
  // The devices stage Matmul operands from the received pieces themselves
  // (Device::gathers_pieces), so those need not be made contiguous first.
  bool device_gathers_pieces = false;
  // Resident tensors (null: this server keeps none), and whether their memory is host
  // memory (Device::resident_in_host_memory).
  TensorStore* store = nullptr;
  bool resident_in_host_memory = true;
  // Shared-memory regions callers registered (null: --shm=off).
  const RegionTable* regions = nullptr;
};

struct GemmRequest : Job {
  // The caller's tenant ("" without authentication): whose resident tensors it may use,
  // and who owns a C it keeps.
  std::string tenant;
  // The request as received (payloads used in place point into it) and the memory it
  // holds; let go as soon as nothing points into it.
  std::vector<grpc::Slice> received;
  Reservation received_reservation;
  // The payloads copied off the received bytes (null when all are used in place).
  std::unique_ptr<HostBuffer> copied;
  // Resident operands read back canonical for a host-memory device (null when none was
  // re-laid out).
  std::unique_ptr<HostBuffer> unpacked;
  // C's shape, payload bytes in and out, and host work on the operands before queueing
  // (copying payloads, dequantizing), which responses report as copy-in.
  std::vector<int64_t> output_shape;
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;  // C in the response (0 when it is kept resident)
  absl::Duration prepare;
  // Job::quantized points here for a QuantizedMatmul on a quantized kernel.
  QuantizedOperands packed;
  // FP32 operands made on the host (the host path, or a quantized A for a kernel that
  // reads it dense) and their memory.
  std::unique_ptr<float[]> dequantized;
  Reservation dequantized_reservation;
  // Resident operands, pinned until the request goes; and the tensor C is written into
  // when the request keeps C resident (committed to the store once the job succeeded).
  TensorRefs resident_refs;
  std::shared_ptr<StoredTensor> kept_c;
  // The shared-memory regions its payloads are read from (and C written to, at c_region
  // when the request gives a c_shm), held until the request goes.
  std::vector<std::shared_ptr<SharedRegion>> regions;
  char* c_region = nullptr;
};

// Prepares `request` from `received`, the bytes of a MatmulRequest (method kMatmul) or a
// QuantizedMatmulRequest, which it takes (leaving `received` empty). *label is set as
// soon as the request's precision (or weight format) is known, so a failure after
// validation still counts under it. C's destination is left unset: the caller calls
// SetResultDestination once it has the buffer of the response (unless C is kept).
absl::Status PrepareRequest(const GemmRequestContext& context, RpcMethod method,
                            grpc::ByteBuffer* received, GemmRequest* request,
                            PrecisionLabel* label);
// The same from bytes already taken (TakeReceived), whose runs are the request message.
absl::Status PrepareReceived(const GemmRequestContext& context, RpcMethod method,
                             Received received, GemmRequest* request, PrecisionLabel* label);

// Where the job writes C: the request's region slice (c_shm), the kept resident tensor
// when the request keeps C (in host memory, or in the device's memory on a device that
// reads it there), else `response` (output_bytes of host memory that the response
// carries).
void SetResultDestination(const GemmRequestContext& context, void* response,
                          GemmRequest* request);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_GEMM_REQUEST_H_
