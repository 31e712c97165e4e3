// Shared memory a client can shrink under the server: once the client truncates a POSIX
// shared-memory object, touching a page of the server's mapping past the object's new
// end raises SIGBUS, on whatever thread touched it (a copy thread, a BLAS thread). The
// guard's handler maps a private zero page over a faulting page that lies in a guarded
// range, so the access completes (reading zeros, or writing into memory nobody else
// sees), and counts the fault against the range; the call that used the range then
// fails. A SIGBUS anywhere else goes to the handler installed before (a real bug still
// ends the process). Thread-safe; the handler is async-signal-safe.
#ifndef GEMMD_SERVER_REGIONS_BUS_FAULT_GUARD_H_
#define GEMMD_SERVER_REGIONS_BUS_FAULT_GUARD_H_

#include <cstddef>
#include <cstdint>

namespace gemmd {

class BusFaultGuard {
 public:
  // Most ranges guarded at once (regions registered, all tenants together).
  static constexpr int kMaxRanges = 4096;

  // Installs the SIGBUS handler (once; later calls do nothing).
  static void Install();

  // Guards [start, start + bytes): a slot for Faults and Remove, or -1 when every slot
  // is taken. Installs the handler if it is not yet.
  static int Add(const void* start, size_t bytes);
  // Stops guarding the slot's range (before it is unmapped).
  static void Remove(int slot);
  // Faults resolved in the slot's range since Add.
  static uint64_t Faults(int slot);
};

}  // namespace gemmd

#endif  // GEMMD_SERVER_REGIONS_BUS_FAULT_GUARD_H_
