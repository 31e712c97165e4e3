#include "server/regions/bus_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace gemmd {
namespace {

// Slots the handler reads without a lock: a range is live while begin != 0. Add writes
// end, then begin; Remove clears begin first.
std::atomic<uintptr_t> g_begin[BusFaultGuard::kMaxRanges];
std::atomic<uintptr_t> g_end[BusFaultGuard::kMaxRanges];
std::atomic<uint64_t> g_faults[BusFaultGuard::kMaxRanges];
std::atomic<int> g_high_water{0};  // slots at or past it have never been used
std::mutex g_slots_mu;             // Add and Remove against each other

struct sigaction g_previous;
std::once_flag g_installed;
uintptr_t g_page = 4096;

void Chain(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: restore it; returning re-runs the access, which faults again and
  // ends the process as an unguarded SIGBUS would have.
  signal(SIGBUS, SIG_DFL);
}

void OnBusError(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  const int slots = g_high_water.load(std::memory_order_acquire);
  for (int i = 0; i < slots; ++i) {
    const uintptr_t begin = g_begin[i].load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at >= g_end[i].load(std::memory_order_acquire)) continue;
    void* page = reinterpret_cast<void*>(at & ~(g_page - 1));
    // mmap is a plain system call: safe here, though POSIX does not list it.
    if (mmap(page, g_page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1,
             0) == MAP_FAILED) {
      break;
    }
    g_faults[i].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Chain(sig, info, context);
}

}  // namespace

void BusFaultGuard::Install() {
  std::call_once(g_installed, [] {
    g_page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction action = {};
    action.sa_sigaction = OnBusError;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous);
  });
}

int BusFaultGuard::Add(const void* start, size_t bytes) {
  Install();
  std::lock_guard<std::mutex> lock(g_slots_mu);
  for (int i = 0; i < kMaxRanges; ++i) {
    if (g_begin[i].load(std::memory_order_relaxed) != 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(start);
    g_faults[i].store(0, std::memory_order_relaxed);
    g_end[i].store(begin + bytes, std::memory_order_release);
    g_begin[i].store(begin, std::memory_order_release);
    if (i >= g_high_water.load(std::memory_order_relaxed)) {
      g_high_water.store(i + 1, std::memory_order_release);
    }
    return i;
  }
  return -1;
}

void BusFaultGuard::Remove(int slot) {
  if (slot < 0 || slot >= kMaxRanges) return;
  std::lock_guard<std::mutex> lock(g_slots_mu);
  g_begin[slot].store(0, std::memory_order_release);
  g_end[slot].store(0, std::memory_order_release);
}

uint64_t BusFaultGuard::Faults(int slot) {
  if (slot < 0 || slot >= kMaxRanges) return 0;
  return g_faults[slot].load(std::memory_order_relaxed);
}

}  // namespace gemmd
