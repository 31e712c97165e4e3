/* The BLAS GEMM routines libgemmd_blas.so defines, as any BLAS declares them: the Fortran
   ones with gfortran's calling convention (arguments by reference, the lengths of the
   character arguments last; only their first character is read, so callers that pass
   no lengths work too), the CBLAS ones with the enums as ints (their values: 101/102
   row/column major, 111/112/113 no/transpose/conjugate transpose). A plain C header,
   for programs and tests that call BLAS without a BLAS header of their own. */
#ifndef GEMMD_CLIENT_BLAS_BLAS_GEMM_H_
#define GEMMD_CLIENT_BLAS_BLAS_GEMM_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc, size_t transa_len, size_t transb_len);
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc, size_t transa_len, size_t transb_len);
void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int layout, int trans_a, int trans_b, int m, int n, int k, double alpha,
                 const double* a, int lda, const double* b, int ldb, double beta, double* c,
                 int ldc);

#ifdef __cplusplus
}
#endif

#endif /* GEMMD_CLIENT_BLAS_BLAS_GEMM_H_ */
