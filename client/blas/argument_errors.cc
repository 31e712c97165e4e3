#include "client/blas/argument_errors.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdio>

namespace gemmd::blas {
namespace {

using XerblaFn = void (*)(const char*, const int*, size_t);
using CblasXerblaFn = void (*)(int, const char*, const char*, ...);

}  // namespace

void ReportFortranError(Element element, int position) {
  const char* name = element == Element::kFloat64 ? "DGEMM " : "SGEMM ";
  // This library defines no XERBLA, so the first one in the program's scope is the
  // program's own or its BLAS's.
  auto xerbla = reinterpret_cast<XerblaFn>(dlsym(RTLD_DEFAULT, "xerbla_"));
  if (xerbla != nullptr) {
    xerbla(name, &position, 6);
    return;
  }
  std::fprintf(stderr, " ** On entry to %.5s parameter number %2d had an illegal value\n", name,
               position);
}

void ReportCblasError(Element element, int info, bool row_major) {
  const char* name = element == Element::kFloat64 ? "cblas_dgemm" : "cblas_sgemm";
  auto cblas_xerbla = reinterpret_cast<CblasXerblaFn>(dlsym(RTLD_DEFAULT, "cblas_xerbla"));
  if (cblas_xerbla == nullptr) {
    std::fprintf(stderr, "Parameter %d to routine %s was incorrect\n", info, name);
    return;
  }
  // Reference CBLAS's cblas_xerbla maps a row-major call's positions back while this is
  // set (its cblas_xgemm sets it for the call); the BLAS testers define their own.
  int* row_major_flag = static_cast<int*>(dlsym(RTLD_DEFAULT, "RowMajorStrg"));
  const int saved = row_major_flag != nullptr ? *row_major_flag : 0;
  if (row_major_flag != nullptr) *row_major_flag = row_major ? 1 : 0;
  cblas_xerbla(info, name, "");
  if (row_major_flag != nullptr) *row_major_flag = saved;
}

}  // namespace gemmd::blas
