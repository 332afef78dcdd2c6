#ifndef SHARDD_DAEMON_CORE_MONO_TIME_H_
#define SHARDD_DAEMON_CORE_MONO_TIME_H_

#include <string>

#include "absl/time/time.h"

namespace shardd {

// A point on the monotonic clock (CLOCK_MONOTONIC, std::chrono::steady_clock):
// it never steps when NTP or an operator sets the wall clock, so every
// lease, deadline, timeout and schedule of ours is a MonoTime. It is a type
// of its own, not an absl::Time, so that the compiler refuses to mix the two:
// wall time (absl::Time) is only for what a person or another process reads
// (log and metric timestamps, checkpoint names). Its origin is arbitrary (the
// steady clock's: boot), so a MonoTime means nothing outside this process.
//
// Arithmetic follows absl::Time's: MonoTime ± Duration, MonoTime − MonoTime,
// infinities saturate. A value type; thread-compatible.
class MonoTime {
 public:
  constexpr MonoTime() = default;

  // The origin plus `d`: for tests and for the clock's implementation.
  static constexpr MonoTime FromOrigin(absl::Duration d) { return MonoTime(d); }
  static constexpr MonoTime InfiniteFuture() {
    return MonoTime(absl::InfiniteDuration());
  }
  static constexpr MonoTime InfinitePast() {
    return MonoTime(-absl::InfiniteDuration());
  }

  constexpr absl::Duration SinceOrigin() const { return since_origin_; }

  MonoTime& operator+=(absl::Duration d) {
    since_origin_ += d;
    return *this;
  }
  MonoTime& operator-=(absl::Duration d) {
    since_origin_ -= d;
    return *this;
  }
  friend MonoTime operator+(MonoTime t, absl::Duration d) { return t += d; }
  friend MonoTime operator+(absl::Duration d, MonoTime t) { return t += d; }
  friend MonoTime operator-(MonoTime t, absl::Duration d) { return t -= d; }
  friend absl::Duration operator-(MonoTime a, MonoTime b) {
    return a.since_origin_ - b.since_origin_;
  }
  friend bool operator==(MonoTime a, MonoTime b) {
    return a.since_origin_ == b.since_origin_;
  }
  friend bool operator!=(MonoTime a, MonoTime b) { return !(a == b); }
  friend bool operator<(MonoTime a, MonoTime b) {
    return a.since_origin_ < b.since_origin_;
  }
  friend bool operator>(MonoTime a, MonoTime b) { return b < a; }
  friend bool operator<=(MonoTime a, MonoTime b) { return !(b < a); }
  friend bool operator>=(MonoTime a, MonoTime b) { return !(a < b); }

 private:
  explicit constexpr MonoTime(absl::Duration d) : since_origin_(d) {}

  absl::Duration since_origin_;
};

// The monotonic clock's current reading (steady_clock).
MonoTime MonoNow();

// "t0+1.5s" style text for messages and test failures.
std::string FormatMonoTime(MonoTime t);

}  // namespace shardd

#endif  // SHARDD_DAEMON_CORE_MONO_TIME_H_
