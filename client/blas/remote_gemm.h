// A GemmCall computed by a gemmd server, through the C++ client library: the column-major
// operands sent as the row-major product they are (C^T = op(B)^T op(A)^T, no transposing
// copy), packed only when a leading dimension leaves gaps between columns, striped over
// several connections when they are large (client/striped_call.h). C comes back into the
// caller's array when it is contiguous and beta = 0, else into a buffer that is then
// merged as C = result + beta * C: C never travels to the server.
#ifndef GEMMD_CLIENT_BLAS_REMOTE_GEMM_H_
#define GEMMD_CLIENT_BLAS_REMOTE_GEMM_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/blas/gemm_call.h"
#include "client/blas/shm_staging.h"
#include "client/gemm_client.h"

namespace gemmd::blas {

// The Matmul a call is, on the server: FP32 for sgemm (never a reduced precision),
// FP64 for dgemm. Exposed for tests.
struct RemoteOperands {
  MatmulArgs args;
  std::unique_ptr<char[]> packed_a, packed_b;  // where a leading dimension left gaps
};
// `a_into`, `b_into` given: the operands' bytes are copied (packed) there instead.
void BuildMatmul(const GemmCall& call, RemoteOperands* out, char* a_into = nullptr,
                 char* b_into = nullptr);

// The bytes a call's operands and C take staged in a shared-memory region.
int64_t StagedBytes(const GemmCall& call);

// Computes `call` on the server `client` reaches, within `timeout`, over `stripes`
// connections (CallOptions::stripes; -1: settings.h's kAutoStripes rule), or, given a
// `region` of at least StagedBytes(call) registered with that server, through it: A and B
// copied in, C read back out. On an error C is as it was, except where beta = 0 (C then
// is only written, and whoever computes the call next writes all of it).
absl::Status RunRemote(GemmClient& client, const GemmCall& call, absl::Duration timeout,
                       int stripes, const ShmStaging::Lease* region = nullptr);

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_REMOTE_GEMM_H_
