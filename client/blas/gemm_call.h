// One xGEMM call as the Fortran BLAS defines it, whichever entry point it came through:
// column-major storage, C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, op(X) = X or
// X^T, each matrix a sub-matrix of a larger array (its leading dimension, ld >= rows).
// The CBLAS entry points turn a row-major call into the column-major one it is
// (cblas_arguments.h), so everything past the entry points sees this one form.
#ifndef GEMMD_CLIENT_BLAS_GEMM_CALL_H_
#define GEMMD_CLIENT_BLAS_GEMM_CALL_H_

#include <cstdint>

namespace gemmd::blas {

enum class Element { kFloat32, kFloat64 };

inline int64_t ElementBytes(Element e) { return e == Element::kFloat64 ? 8 : 4; }
inline const char* RoutineName(Element e) { return e == Element::kFloat64 ? "dgemm" : "sgemm"; }

struct GemmCall {
  Element element = Element::kFloat64;
  bool transpose_a = false;  // op(A) = A^T ('T' or 'C': the same for real matrices)
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1.0, beta = 0.0;  // exact for sgemm too: a float widens without rounding
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;

  // The multiply-adds' flops, 2*m*n*k (what GEMMD_BLAS_MIN_FLOPS is compared with).
  double flops() const { return 2.0 * static_cast<double>(m) * n * k; }
  // A product to compute: the reference BLAS reads A and B only then. Otherwise the call
  // only scales C by beta (or returns at once).
  bool has_product() const { return m > 0 && n > 0 && k > 0 && alpha != 0.0; }
};

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_GEMM_CALL_H_
