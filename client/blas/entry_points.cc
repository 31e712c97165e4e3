// The symbols libgemmd_blas.so exports (exports.map): the Fortran BLAS's sgemm_/dgemm_
// (gfortran's convention: character lengths last; callers that omit them are fine, as
// only the first character is read) and CBLAS's cblas_sgemm/cblas_dgemm. Each checks its
// arguments as the reference does before anything else, then hands the column-major call
// to the offloader.
#include <cstddef>

#include "client/blas/argument_errors.h"
#include "client/blas/blas_gemm.h"
#include "client/blas/gemm_arguments.h"
#include "client/blas/gemm_call.h"
#include "client/blas/offload.h"

namespace gemmd::blas {
namespace {

void FortranGemm(Element element, char transa, char transb, int m, int n, int k, double alpha,
                 const void* a, int lda, const void* b, int ldb, double beta, void* c, int ldc) {
  if (int error = FortranGemmError(transa, transb, m, n, k, lda, ldb, ldc); error != 0) {
    ReportFortranError(element, error);
    return;
  }
  GemmCall call;
  call.element = element;
  call.transpose_a = transa != 'N' && transa != 'n';
  call.transpose_b = transb != 'N' && transb != 'n';
  call.m = m, call.n = n, call.k = k;
  call.alpha = alpha, call.beta = beta;
  call.a = a, call.lda = lda;
  call.b = b, call.ldb = ldb;
  call.c = c, call.ldc = ldc;
  Compute(call);
}

void CblasGemm(Element element, int layout, int trans_a, int trans_b, int m, int n, int k,
               double alpha, const void* a, int lda, const void* b, int ldb, double beta, void* c,
               int ldc) {
  const CblasTranslation t = TranslateCblasGemm(element, layout, trans_a, trans_b, m, n, k, alpha,
                                                a, lda, b, ldb, beta, c, ldc);
  if (t.error != 0) {
    ReportCblasError(element, t.error, t.row_major);
    return;
  }
  Compute(t.call);
}

}  // namespace
}  // namespace gemmd::blas

using gemmd::blas::Element;

extern "C" {

void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc, size_t, size_t) {
  gemmd::blas::FortranGemm(Element::kFloat32, *transa, *transb, *m, *n, *k, *alpha, a, *lda, b,
                           *ldb, *beta, c, *ldc);
}

void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b, const int* ldb,
            const double* beta, double* c, const int* ldc, size_t, size_t) {
  gemmd::blas::FortranGemm(Element::kFloat64, *transa, *transb, *m, *n, *k, *alpha, a, *lda, b,
                           *ldb, *beta, c, *ldc);
}

void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  gemmd::blas::CblasGemm(Element::kFloat32, layout, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                         ldb, beta, c, ldc);
}

void cblas_dgemm(int layout, int trans_a, int trans_b, int m, int n, int k, double alpha,
                 const double* a, int lda, const double* b, int ldb, double beta, double* c,
                 int ldc) {
  gemmd::blas::CblasGemm(Element::kFloat64, layout, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                         ldb, beta, c, ldc);
}

}  // extern "C"
