// The argument checks of the reference BLAS's xGEMM and of reference CBLAS's
// cblas_xgemm, position for position, so a program (or a BLAS tester) that checks which
// argument was reported bad sees what it would see from the reference implementation.
#ifndef GEMMD_CLIENT_BLAS_GEMM_ARGUMENTS_H_
#define GEMMD_CLIENT_BLAS_GEMM_ARGUMENTS_H_

#include <cstdint>

#include "client/blas/gemm_call.h"

namespace gemmd::blas {

// CBLAS's enumerations (cblas.h), by value: this library declares no cblas.h of its own.
inline constexpr int kCblasRowMajor = 101;
inline constexpr int kCblasColMajor = 102;
inline constexpr int kCblasNoTrans = 111;
inline constexpr int kCblasTrans = 112;
inline constexpr int kCblasConjTrans = 113;

// xGEMM(TRANSA, TRANSB, M, N, K, ALPHA, A, LDA, B, LDB, BETA, C, LDC): 0 when the
// arguments are valid, else the 1-based position of the first bad one, in the reference's
// order (TRANSA, TRANSB, M, N, K, LDA, LDB, LDC), which XERBLA is called with. TRANSx is
// 'N', 'T' or 'C' in either case.
int FortranGemmError(char transa, char transb, int64_t m, int64_t n, int64_t k, int64_t lda,
                     int64_t ldb, int64_t ldc);

// A cblas_xgemm call as the column-major call it is. On a bad argument, `error` is what
// reference CBLAS passes to cblas_xerbla: 1, 2 or 3 for the layout and the transposes,
// else the position the Fortran routine reports for the column-major call plus one (the
// layout argument). For a row-major call that position is of the call with A and B
// swapped, which reference CBLAS maps back while its RowMajorStrg is set; `row_major`
// says to set it.
struct CblasTranslation {
  int error = 0;
  bool row_major = false;
  GemmCall call;  // valid when error == 0
};
CblasTranslation TranslateCblasGemm(Element element, int layout, int trans_a, int trans_b,
                                    int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                                    int64_t lda, const void* b, int64_t ldb, double beta, void* c,
                                    int64_t ldc);

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_GEMM_ARGUMENTS_H_
