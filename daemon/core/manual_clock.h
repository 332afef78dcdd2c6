#ifndef SHARDD_DAEMON_CORE_MANUAL_CLOCK_H_
#define SHARDD_DAEMON_CORE_MANUAL_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/clock.h"
#include "daemon/core/mono_time.h"

namespace shardd {

// A Clock for tests: both sides move only when told. Advance() moves both
// (time passes); StepWall() moves only the wall side, as NTP or an operator
// setting the clock does. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(
      MonoTime mono = MonoTime::FromOrigin(absl::Seconds(1000)),
      absl::Time wall = absl::FromUnixSeconds(1'800'000'000))
      : mono_(mono), wall_(wall) {}

  MonoTime MonotonicNow() override {
    absl::MutexLock lock(&mu_);
    return mono_;
  }
  absl::Time WallNow() override {
    absl::MutexLock lock(&mu_);
    return wall_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    mono_ += d;
    wall_ += d;
  }
  void StepWall(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    wall_ += d;
  }

 private:
  absl::Mutex mu_;
  MonoTime mono_ ABSL_GUARDED_BY(mu_);
  absl::Time wall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd

#endif  // SHARDD_DAEMON_CORE_MANUAL_CLOCK_H_
