// The batcher's notion of "now", injectable so tests can step time by hand (a queue
// delay of 1 ms is then exactly 1 ms, however slow the test machine is).
#ifndef GEMMD_SERVER_OBSERVABILITY_CLOCK_H_
#define GEMMD_SERVER_OBSERVABILITY_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gemmd {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The wall clock (process-wide, never destroyed).
  static Clock* Real();
};

class WallClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

inline Clock* Clock::Real() {
  static Clock* const real = new WallClock();
  return real;
}

}  // namespace gemmd

#endif  // GEMMD_SERVER_OBSERVABILITY_CLOCK_H_
