// The client's side of the GEMM messages, shared by every way a call is sent (unary
// calls in gemm_client.cc, MatmulStream in matmul_stream.h, striped calls): arguments to
// an encoded request that references the caller's tensors, and a received MatmulResponse
// into a MatmulResult. Internal to the client library. Thread-safe (pure functions).
#ifndef GEMMD_CLIENT_REQUEST_ENCODING_H_
#define GEMMD_CLIENT_REQUEST_ENCODING_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "client/gemm_client.h"
#include "proto/wire/gemm_wire.h"
#include "proto/wire/wire_format.h"

namespace gemmd {

// The request; its payloads reference the arguments' bytes (none for a tensor in a
// region or sent by handle).
wire::EncodedMessage EncodeMatmulArgs(const MatmulArgs& args);
wire::EncodedMessage EncodeQuantizedArgs(const QuantizedMatmulArgs& args);

// Whether any operand or C is in a shared-memory region.
bool UsesRegions(const MatmulArgs& args);
bool UsesRegions(const QuantizedMatmulArgs& args);

// INVALID_ARGUMENT unless exactly one of a, a_dense and a_ref is set.
absl::Status CheckOneA(const QuantizedMatmulArgs& args);

// A MatmulResponse's bytes into `result`: C into `c_out` when it is not empty (it must
// hold C: INVALID_ARGUMENT otherwise), else into a buffer the result owns; no C bytes
// when the response names C's handle (keep_c) or the request sent C to a region
// (`c_in_region`). INTERNAL when the bytes are not a MatmulResponse that fits itself.
absl::Status ReadMatmulResponse(const wire::ByteRuns& runs, absl::Span<char> c_out,
                                bool c_in_region, MatmulResult* result);

}  // namespace gemmd

#endif  // GEMMD_CLIENT_REQUEST_ENCODING_H_
