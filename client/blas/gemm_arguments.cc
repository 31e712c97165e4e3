#include "client/blas/gemm_arguments.h"

#include <algorithm>

namespace gemmd::blas {
namespace {

char Upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
bool ValidTranspose(char t) { return t == 'N' || t == 'T' || t == 'C'; }

// CBLAS_TRANSPOSE to its Fortran letter; 0 for a value that is none of them.
char TransposeLetter(int t) {
  switch (t) {
    case kCblasNoTrans:
      return 'N';
    case kCblasTrans:
      return 'T';
    case kCblasConjTrans:
      return 'C';
    default:
      return 0;
  }
}

}  // namespace

int FortranGemmError(char transa, char transb, int64_t m, int64_t n, int64_t k, int64_t lda,
                     int64_t ldb, int64_t ldc) {
  transa = Upper(transa);
  transb = Upper(transb);
  const int64_t rows_a = transa == 'N' ? m : k;
  const int64_t rows_b = transb == 'N' ? k : n;
  if (!ValidTranspose(transa)) return 1;
  if (!ValidTranspose(transb)) return 2;
  if (m < 0) return 3;
  if (n < 0) return 4;
  if (k < 0) return 5;
  if (lda < std::max<int64_t>(1, rows_a)) return 8;
  if (ldb < std::max<int64_t>(1, rows_b)) return 10;
  if (ldc < std::max<int64_t>(1, m)) return 13;
  return 0;
}

CblasTranslation TranslateCblasGemm(Element element, int layout, int trans_a, int trans_b,
                                    int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                                    int64_t lda, const void* b, int64_t ldb, double beta, void* c,
                                    int64_t ldc) {
  CblasTranslation out;
  if (layout != kCblasColMajor && layout != kCblasRowMajor) {
    out.error = 1;
    return out;
  }
  out.row_major = layout == kCblasRowMajor;
  const char ta = TransposeLetter(trans_a);
  const char tb = TransposeLetter(trans_b);
  if (ta == 0) {
    out.error = 2;
    return out;
  }
  if (tb == 0) {
    out.error = 3;
    return out;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same bytes,
  // with A and B (and M and N) trading places.
  const bool swap = out.row_major;
  const char t1 = swap ? tb : ta, t2 = swap ? ta : tb;
  GemmCall& call = out.call;
  call.element = element;
  call.transpose_a = t1 != 'N';
  call.transpose_b = t2 != 'N';
  call.m = swap ? n : m;
  call.n = swap ? m : n;
  call.k = k;
  call.alpha = alpha;
  call.beta = beta;
  call.a = swap ? b : a;
  call.lda = swap ? ldb : lda;
  call.b = swap ? a : b;
  call.ldb = swap ? lda : ldb;
  call.c = c;
  call.ldc = ldc;
  const int fortran_error = FortranGemmError(t1, t2, call.m, call.n, k, call.lda, call.ldb, ldc);
  if (fortran_error != 0) out.error = fortran_error + 1;
  return out;
}

}  // namespace gemmd::blas
