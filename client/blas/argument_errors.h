// Reporting a bad argument the way the BLAS a program was written against does: the
// Fortran routines call XERBLA (the program's own if it defines one, as the BLAS testers
// do, else the system BLAS's), the CBLAS ones cblas_xerbla. Where neither exists the
// reference's message is printed; unlike reference CBLAS, the program is not ended.
#ifndef GEMMD_CLIENT_BLAS_ARGUMENT_ERRORS_H_
#define GEMMD_CLIENT_BLAS_ARGUMENT_ERRORS_H_

#include "client/blas/gemm_call.h"

namespace gemmd::blas {

// XERBLA('DGEMM ', position) (or 'SGEMM ').
void ReportFortranError(Element element, int position);
// cblas_xerbla(info, "cblas_dgemm", ...) with reference CBLAS's RowMajorStrg set as it
// sets it (gemm_arguments.h, CblasTranslation).
void ReportCblasError(Element element, int info, bool row_major);

}  // namespace gemmd::blas

#endif  // GEMMD_CLIENT_BLAS_ARGUMENT_ERRORS_H_
