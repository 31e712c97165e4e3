// ThreadSanitizer and Debian's Abseil: libabsl_synchronization.so is not built with TSan,
// so the happens-before edges of absl::Mutex, CondVar and Notification are invisible to it
// and every access guarded by them would be reported as a race. Linked into a test binary
// of the TSan build (never into a product), this file interposes those functions (an
// executable's definitions come before a shared library's, for calls from inside the
// library too), calls the real ones through dlsym(RTLD_NEXT), and tells TSan what they
// do: a lock acquires the mutex, an unlock releases it, a wait releases and reacquires
// it, Notify releases what WaitForNotification and HasBeenNotified acquire. Conditions
// (LockWhen, Await) are wrapped so that they acquire before reading guarded state: Abseil
// evaluates them with the lock held, in the waiting thread or the releasing one.
//
// This gives TSan the edges, not lock-order checking (deadlocks are not reported).
// Abseil's own deadlock detection is switched off before main: its lock graph lives in
// memory guarded by an uninstrumented SpinLock, and TSan sees the graph's memmoves (an
// intercepted call) from two threads as a race inside Abseil.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#if !defined(__SANITIZE_THREAD__) && !(defined(__has_feature) && __has_feature(thread_sanitizer))
#error "tsan_absl_sync.cc belongs in a -fsanitize=thread build only"
#endif

namespace {

#define GEMMD_STR2(x) #x
#define GEMMD_STR(x) GEMMD_STR2(x)

// The mangled name of absl::<inline namespace>::<rest>, a const member function's with
// `is_const`.
std::string Mangled(const char* rest, bool is_const) {
  const std::string ns = GEMMD_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return std::string(is_const ? "_ZNK" : "_ZN") + "4absl" + std::to_string(ns.size()) + ns + rest;
}

template <typename Fn>
Fn Real(const char* rest, bool is_const = false) {
  const std::string name = Mangled(rest, is_const);
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

using absl::CondVar;
using absl::Condition;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// A condition that acquires its mutex before it reads guarded state, and releases it after
// (the waiter acquires once its call returns, so the evaluation, perhaps in another
// thread, happens before whatever the waiter does next).
struct Acquiring {
  const Condition* condition;
  Mutex* mu;
};
bool EvalAcquiring(Acquiring* c) {
  __tsan_acquire(c->mu);
  const bool met = c->condition->Eval();
  __tsan_release(c->mu);
  return met;
}

// A second sync object per mutex, for its waiters' conditions: a thread registers its
// condition (built on its stack) after releasing here, and a thread that lets the mutex go
// (and so may evaluate the waiters' conditions) acquires here first.
void* WaitersOf(const Mutex* mu) { return const_cast<char*>(reinterpret_cast<const char*>(mu)) + 1; }

// Await: registers a condition, and lets the mutex go until it holds.
void ReleaseForWait(Mutex* mu) {
  __tsan_release(WaitersOf(mu));
  __tsan_acquire(WaitersOf(mu));
  __tsan_release(mu);
}

// Where Notification keeps its flag (after its Mutex), which HasBeenNotified reads inline.
const void* FlagOf(const Notification* n) {
  return reinterpret_cast<const char*>(n) + sizeof(Mutex);
}

[[gnu::constructor]] void IgnoreAbseilDeadlockGraph() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_acquire(WaitersOf(this));
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_acquire(WaitersOf(this));
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  __tsan_release(WaitersOf(this));
  real(this, wrapped);
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  __tsan_release(WaitersOf(this));
  real(this, wrapped);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  __tsan_release(WaitersOf(this));
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);  // held either way
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  __tsan_release(WaitersOf(this));
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}

void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  ReleaseForWait(this);
  real(this, wrapped);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  ReleaseForWait(this);
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Acquiring a{&cond, this};
  const Condition wrapped(EvalAcquiring, &a);
  ReleaseForWait(this);
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_acquire(WaitersOf(mu));
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_acquire(WaitersOf(mu));
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_acquire(WaitersOf(mu));
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(const_cast<void*>(FlagOf(this)));
  real(this);
}
void Notification::WaitForNotification() const {
  static auto real = Real<void (*)(const Notification*)>("12Notification19WaitForNotificationEv", true);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static auto real = Real<bool (*)(const Notification*, Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
