// A GEMM request's operands by reference: resident tensors (server/store) looked up,
// pinned for the life of the request, and put in the request's place as the tensors
// the validators check (shape and dtype from the store, bytes where the tensor lives).
//
// Errors: INVALID_ARGUMENT for an operand sent both inline and by reference, or a tensor
// of the wrong kind (a quantized one where Matmul needs a dense one, a dense B in a
// QuantizedMatmul); NOT_FOUND and FAILED_PRECONDITION from the store (prefixed with the
// field: "b_ref: no tensor ..."); FAILED_PRECONDITION when a server without a store is
// asked, or when the operands live on different devices.
#ifndef GEMMD_SERVER_RPC_TENSOR_REFS_H_
#define GEMMD_SERVER_RPC_TENSOR_REFS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gemm/v1/gemm.pb.h"
#include "proto/wire/gemm_wire.h"
#include "server/rpc/matmul_validation.h"
#include "server/store/tensor_store.h"

namespace gemmd {

// The pinned tensors of one request (null: that operand is inline).
struct TensorRefs {
  TensorPin a, b, c;

  // The device every pinned tensor is on (-1: none pinned); FAILED_PRECONDITION when
  // they are on different devices, UNAVAILABLE when theirs has faulted.
  absl::StatusOr<int> Device() const;
  // Bytes of the pinned operands (not received with the request).
  int64_t Bytes() const;
};

// A dense tensor's header as the validators read it (shape, dtype; no data).
gemm::v1::Tensor DenseHead(const StoredTensor& t);
gemm::v1::QuantizedTensor QuantizedHead(const StoredTensor& t);
// Where its bytes are (in the device's resident memory: not readable on the host on a GPU).
absl::string_view DataOf(const StoredTensor& t);
absl::string_view ScalesOf(const StoredTensor& t);

// Pins a_ref / b_ref / c_ref of `head` and sets head.a / b / c to their headers.
// `tenant`: the caller's; another tenant's tensors are NOT_FOUND.
absl::Status ResolveMatmulRefs(TensorStore* store, absl::string_view tenant,
                               gemm::v1::MatmulRequest* head, TensorRefs* refs,
                               MatmulResidency* residency);
// The same for a QuantizedMatmul: a_ref (quantized: head.a; dense: head.a_dense), b_ref.
absl::Status ResolveQuantizedRefs(TensorStore* store, absl::string_view tenant,
                                  gemm::v1::QuantizedMatmulRequest* head, TensorRefs* refs);

}  // namespace gemmd

#endif  // GEMMD_SERVER_RPC_TENSOR_REFS_H_
