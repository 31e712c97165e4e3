#include "client/blas/local_blas.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace gemmd::blas {
namespace {

// The object (shared library or executable) `address` lies in; null when none.
const void* ObjectOf(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

bool IsThisLibrary(const void* symbol) {
  static const int kMarker = 0;
  return ObjectOf(symbol) == ObjectOf(&kMarker);
}

// Both routines from `handle` (RTLD_NEXT or a dlopen'ed library), or false when either
// is missing or is this library's own.
bool Take(void* handle, const std::string& source, LocalBlas* out) {
  void* s = dlsym(handle, "sgemm_");
  void* d = dlsym(handle, "dgemm_");
  if (s == nullptr || d == nullptr || IsThisLibrary(s) || IsThisLibrary(d)) return false;
  out->sgemm = reinterpret_cast<SgemmFn>(s);
  out->dgemm = reinterpret_cast<DgemmFn>(d);
  Dl_info info;
  out->source = (dladdr(d, &info) != 0 && info.dli_fname != nullptr)
                    ? absl::StrCat(source, " (", info.dli_fname, ")")
                    : source;
  return true;
}

bool Open(const std::string& library, LocalBlas* out) {
  // RTLD_LOCAL: its symbols serve this library only, never the program's other lookups.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  if (Take(handle, library, out)) return true;
  dlclose(handle);
  return false;
}

}  // namespace

absl::Status ResolveLocalBlas(const std::string& library, LocalBlas* out) {
  if (!library.empty()) {
    if (Open(library, out)) return absl::OkStatus();
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("GEMMD_BLAS_FALLBACK=", library, " has no sgemm_ and dgemm_ to call",
                     why != nullptr ? absl::StrCat(": ", why) : std::string()));
  }
  if (Take(RTLD_NEXT, "the program's BLAS", out)) return absl::OkStatus();
  for (const char* candidate : {"libblas.so.3", "libopenblas.so.0"}) {
    if (Open(candidate, out)) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      "no local BLAS: the program links none after this library, and neither libblas.so.3 "
      "nor libopenblas.so.0 could be loaded (set GEMMD_BLAS_FALLBACK to one)");
}

void RunLocal(const LocalBlas& blas, const GemmCall& call) {
  const char ta = call.transpose_a ? 'T' : 'N';
  const char tb = call.transpose_b ? 'T' : 'N';
  // The sizes came in as Fortran or CBLAS ints, so they fit.
  const int m = static_cast<int>(call.m), n = static_cast<int>(call.n);
  const int k = static_cast<int>(call.k);
  const int lda = static_cast<int>(call.lda), ldb = static_cast<int>(call.ldb);
  const int ldc = static_cast<int>(call.ldc);
  if (call.element == Element::kFloat64) {
    blas.dgemm(&ta, &tb, &m, &n, &k, &call.alpha, static_cast<const double*>(call.a), &lda,
               static_cast<const double*>(call.b), &ldb, &call.beta, static_cast<double*>(call.c),
               &ldc, 1, 1);
  } else {
    const float alpha = static_cast<float>(call.alpha);
    const float beta = static_cast<float>(call.beta);
    blas.sgemm(&ta, &tb, &m, &n, &k, &alpha, static_cast<const float*>(call.a), &lda,
               static_cast<const float*>(call.b), &ldb, &beta, static_cast<float*>(call.c), &ldc, 1,
               1);
  }
}

}  // namespace gemmd::blas
