// The TSan suite's own check, built in the TSan build only. `synchronized`: hand-offs
// through absl::Mutex (lock, LockWhen), CondVar and Notification (Wait and
// HasBeenNotified), which TSan must not report, so tsan_absl_sync.cc supplies their
// edges. `race`: an unguarded counter bumped by two threads, which TSan must report, so
// the build is really instrumented and the interposer hides nothing.
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

int Synchronized() {
  absl::Mutex mu;
  long counter = 0;
  auto bump = [&] {
    for (int i = 0; i < 1000; ++i) {
      absl::MutexLock lock(&mu);
      ++counter;
    }
  };
  std::thread a(bump), b(bump);
  a.join();
  b.join();

  int handed = 0;
  absl::Notification notified;
  std::thread c([&] {
    handed = 1;
    notified.Notify();
  });
  notified.WaitForNotification();
  const int first = handed;
  c.join();

  int polled = 0;
  absl::Notification flag;
  std::thread d([&] {
    polled = 2;
    flag.Notify();
  });
  while (!flag.HasBeenNotified()) std::this_thread::yield();
  const int second = polled;
  d.join();

  bool ready = false;
  int when = 0;
  std::thread e([&] {
    when = 3;
    absl::MutexLock lock(&mu);
    ready = true;
  });
  mu.LockWhen(absl::Condition(&ready));
  const int third = when;
  mu.Unlock();
  e.join();

  absl::CondVar cv;
  bool go = false;
  int waited = 0;
  std::thread f([&] {
    waited = 4;
    absl::MutexLock lock(&mu);
    go = true;
    cv.Signal();
  });
  int fourth = 0;
  {
    absl::MutexLock lock(&mu);
    while (!go) cv.Wait(&mu);
    fourth = waited;
  }
  f.join();

  std::printf("counter %ld, hand-offs %d %d %d %d\n", counter, first, second, third, fourth);
  return counter == 2000 && first == 1 && second == 2 && third == 3 && fourth == 4 ? 0 : 1;
}

int Race() {
  long counter = 0;
  std::thread a([&] { ++counter; });
  ++counter;
  a.join();
  std::printf("counter %ld\n", counter);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "synchronized") == 0) return Synchronized();
  if (argc == 2 && std::strcmp(argv[1], "race") == 0) return Race();
  std::fprintf(stderr, "usage: tsan_canary synchronized|race\n");
  return 2;
}
