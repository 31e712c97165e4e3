#include "server/blas_thread_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace gemmd {

void LimitBlasThreadWait(char** argv) {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return;
  if (setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);
}

}  // namespace gemmd
