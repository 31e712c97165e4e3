#include "server/observability/thread_name.h"

#include <pthread.h>

#include <string>

namespace gemmd {

void NameThisThread(absl::string_view name) {
  constexpr size_t kMaxName = 15;  // the kernel's TASK_COMM_LEN, less the terminator
  const std::string cut(name.substr(0, kMaxName));
  (void)pthread_setname_np(pthread_self(), cut.c_str());  // a name is only a label
}

}  // namespace gemmd
