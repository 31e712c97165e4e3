// A floor under thread stack sizes that libraries pick for their own threads.
//
// Why: civetweb (the HTTP server under prometheus-cpp's Exposer, i.e. /metrics) starts
// its threads with a fixed 100 KiB stack, and glibc carves every loaded library's static
// TLS out of that stack: OpenBLAS alone takes 60 KiB and the CUDA runtime 4 KiB more,
// which leaves civetweb too little, and a /metrics scrape overflowed its stack (a crash
// seen in tests, in printf inside civetweb). civetweb has no setting for it, so the
// server interposes pthread_attr_setstacksize: a requested size is raised to at least
// 1 MiB, never lowered. The symbol is exported from every binary that links
// gemm_server_lib (see server/CMakeLists.txt), so the dynamic linker binds civetweb's
// call here; this forwards to glibc's own.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstddef>

namespace {

constexpr size_t kMinThreadStackBytes = size_t{1} << 20;

using SetStackSizeFn = int (*)(pthread_attr_t*, size_t);

SetStackSizeFn RealSetStackSize() {
  static const SetStackSizeFn real =
      reinterpret_cast<SetStackSizeFn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  return RealSetStackSize()(attr, std::max(size, kMinThreadStackBytes));
}
