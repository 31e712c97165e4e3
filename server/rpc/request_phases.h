// The phases of preparing a GEMM request (gemm_request.h has the order and the words),
// each a function from values to a value, so each is tested on its own
// (tests/gemm_request_test.cc). PrepareRequest composes them and fills the GemmRequest
// from their results in one place. Thread-safe.
#ifndef GEMMD_SERVER_RPC_REQUEST_PHASES_H_
#define GEMMD_SERVER_RPC_REQUEST_PHASES_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/gemm_request.h"
#include "server/rpc/quantized_validation.h"
#include "server/rpc/region_payloads.h"

namespace gemmd {

// TakeReceived: the message's bytes, held as gRPC's slices (references, no copy), in a
// Received (gemm_request.h).
// RESOURCE_EXHAUSTED for a message over limits.max_message_bytes or past the memory cap.
// Takes `bytes` (leaving it empty).
absl::StatusOr<Received> TakeReceived(const GemmRequestContext& context, grpc::ByteBuffer* bytes);
// The size check and reservation alone, for a message whose slices are already held.
absl::StatusOr<Reservation> ReserveReceived(const GemmRequestContext& context, int64_t size);

// Bind: the resident tensors a request names, pinned, and the device they are on.
struct Bound {
  TensorRefs refs;
  MatmulResidency residency;  // (Matmul) which operands are resident
  int device = -1;            // the pinned tensors' device; -1 when none is pinned
  const void* shared_b = nullptr;  // a resident B's memory: jobs against it may stack
};
// Sets the head's a / b / c to the pinned tensors' headers (ResolveMatmulRefs).
absl::StatusOr<Bound> BindMatmul(TensorStore* store, absl::string_view tenant,
                                 gemm::v1::MatmulRequest* head);
absl::StatusOr<Bound> BindQuantized(TensorStore* store, absl::string_view tenant,
                                    gemm::v1::QuantizedMatmulRequest* head);

// Validate (Matmul): the payloads as ValidateMatmul reads them before they are placed:
// an inline payload's size as located (no data yet), a resident one where it is.
MatmulPayloads LocatedPayloads(const wire::MatmulRequestWire& located, const TensorRefs& refs);

// Place (Matmul): each payload where the device reads it, and the operands pointing there.
struct PlacedMatmul {
  std::unique_ptr<HostBuffer> copied;  // null when nothing was copied
  bool uses_received = false;          // some payload is read in place
  // Host operands (null where an operand is in pieces, or resident in device memory);
  // c_out unset. c_in only when the problem reads C (beta != 0).
  GemmOperands host;
  HostPieces pieces;
  DeviceOperands on_device;  // resident operands a device reads in its own memory
  absl::Duration took;       // the copying, reported as copy-in
};
// Payloads in a shared-memory region (`regions`, may be null) are read there.
absl::StatusOr<PlacedMatmul> PlaceMatmul(const GemmRequestContext& context,
                                         const wire::MatmulRequestWire& located,
                                         const TensorRefs& refs, const GemmProblem& problem,
                                         const RegionPayloads* regions = nullptr);

// Place (QuantizedMatmul), before Validate: its scale bytes are read there.
struct PlacedQuantized {
  std::unique_ptr<HostBuffer> copied;
  bool uses_received = false;
  wire::QuantizedPayloads payloads;  // inline ones placed, resident ones where they are
  // Canonical copies of resident operands kept re-laid out, for a host-memory device
  // (null: none); the payloads then point here.
  std::unique_ptr<HostBuffer> unpacked;
  absl::Duration took;
};
absl::StatusOr<PlacedQuantized> PlaceQuantized(const GemmRequestContext& context,
                                               const wire::QuantizedMatmulRequestWire& located,
                                               const TensorRefs& refs,
                                               const RegionPayloads* regions = nullptr);

// Place (QuantizedMatmul, after Choose): how its operands reach the kernel on `path`,
// from `packed` (PackedOperands of the placed payloads, what Choose was given).
struct QuantizedInputs {
  // The packed operands the quantized kernel reads (kPacked, kDenseA: A then dense FP32
  // rows in `dequantized`); for kHost the FP32 A and B in `dequantized`.
  QuantizedOperands packed;
  GemmOperands host;  // kHost: A and B, FP32; c_out unset
  DeviceOperands on_device;  // resident packed operands a device reads in its memory
  std::unique_ptr<float[]> dequantized;
  Reservation dequantized_reservation;
  absl::Duration took;
};
// FAILED_PRECONDITION when the path would read a resident tensor on the host and the
// store's memory is a device's; RESOURCE_EXHAUSTED past the memory cap.
absl::StatusOr<QuantizedInputs> QuantizedInputsFor(const GemmRequestContext& context,
                                                   const gemm::v1::QuantizedMatmulRequest& head,
                                                   const ValidatedQuantized& v,
                                                   const wire::QuantizedPayloads& payloads,
                                                   QuantizedOperands packed,
                                                   const TensorRefs& refs, KernelPath path);

// Place: the tensor a request that keeps C writes it into, on `device` (-1: the store's
// choice). FAILED_PRECONDITION on a server without a store; the store's errors
// prefixed "keep_c: ".
absl::StatusOr<std::shared_ptr<StoredTensor>> AllocateKeptC(
    const GemmRequestContext& context, const gemm::v1::ResidentResult& keep,
    const std::vector<int64_t>& shape, DataType dtype, int device, const std::string& tenant);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_REQUEST_PHASES_H_
