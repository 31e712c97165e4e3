// Where each GEMM call is computed, and the record of it: every entry point hands its
// checked call here. A call goes to the server when there is one (GEMMD_TARGET), it has
// a product of at least GEMMD_BLAS_MIN_FLOPS, and the server has not just failed to
// answer; everything else, and every remote call that fails, is computed by the local
// BLAS (local_blas.h). The first fallback is logged once; with GEMMD_BLAS_VERBOSE=1
// every call is, and the counts at exit. Thread-safe: one client, made at the first
// remote call, serves every thread.
#ifndef GEMMD_CLIENT_BLAS_OFFLOAD_H_
#define GEMMD_CLIENT_BLAS_OFFLOAD_H_

#include "client/blas/gemm_call.h"

namespace gemmd::blas {

// Computes a call whose arguments were checked.
void Compute(const GemmCall& call);

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_OFFLOAD_H_
