// The BLAS that computes what stays local: small calls, calls with no product, and every
// call the server could not take. By default the next definition of the routine after
// this library's (dlsym RTLD_NEXT): with LD_PRELOAD, the BLAS the program was linked
// with, so a local call is exactly the call the program would have made. A program with
// no BLAS of its own gets libblas.so.3 (the system's alternative); GEMMD_BLAS_FALLBACK
// names another library instead. A candidate that turns out to be this library itself
// (installed as libblas.so.3) is skipped.
#ifndef GEMMD_CLIENT_BLAS_LOCAL_BLAS_H_
#define GEMMD_CLIENT_BLAS_LOCAL_BLAS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "client/blas/blas_gemm.h"
#include "client/blas/gemm_call.h"

namespace gemmd::blas {

// The Fortran routines' types (blas_gemm.h).
using SgemmFn = decltype(&sgemm_);
using DgemmFn = decltype(&dgemm_);

struct LocalBlas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  std::string source;  // where they came from, for the log
};

// Resolves the routines once; `library` is GEMMD_BLAS_FALLBACK (empty: the default
// search). FAILED_PRECONDITION naming what was tried when no BLAS is found.
absl::Status ResolveLocalBlas(const std::string& library, LocalBlas* out);

// Computes `call` with `blas` (a call whose arguments were checked).
void RunLocal(const LocalBlas& blas, const GemmCall& call);

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_LOCAL_BLAS_H_
