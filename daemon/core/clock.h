#ifndef SHARDD_DAEMON_CORE_CLOCK_H_
#define SHARDD_DAEMON_CORE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd {

// Where a component reads the time, so that tests inject it. Two sides:
// the monotonic side measures every duration (leases, detection, deadlines,
// schedules, backoff, quarantine) and never steps; the wall side only stamps
// what a person or another process reads (decision timestamps, metrics,
// checkpoint names). A wall-clock step of any size changes nothing that is
// measured on the monotonic side. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoTime MonotonicNow() = 0;
  virtual absl::Time WallNow() = 0;

  // The process's real clock (steady_clock and absl::Now()); never null,
  // never destroyed.
  static Clock* Real();
};

class RealClock final : public Clock {
 public:
  MonoTime MonotonicNow() override { return MonoNow(); }
  absl::Time WallNow() override { return absl::Now(); }
};

}  // namespace shardd

#endif  // SHARDD_DAEMON_CORE_CLOCK_H_
