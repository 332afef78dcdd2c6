// Run by deadline_waker_wall_offset_test.sh under libfaketime with the wall
// clock offset by SHARDD_WALL_OFFSET_S seconds (CLOCK_MONOTONIC real), the
// way a wall-clock step leaves a process: AwaitUntil and MonoNotification
// must still wait exactly as long as asked, while Abseil's own timed wait
// (the control, which shows the offset is in force) waits on the kernel's
// real CLOCK_REALTIME against a faked absl::Now() and so returns at once
// (offset < 0) or far too late (offset > 0, not tried: it would sleep the
// whole offset).
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"

namespace {

int failures = 0;

void Expect(bool ok, const char* what, absl::Duration took) {
  std::printf("%s: %s (took %s)\n", ok ? "ok" : "FAILED", what,
              absl::FormatDuration(took).c_str());
  if (!ok) ++failures;
}

}  // namespace

int main() {
  const char* offset_text = std::getenv("SHARDD_WALL_OFFSET_S");
  if (offset_text == nullptr || std::atoi(offset_text) >= 0) {
    std::fprintf(stderr, "set SHARDD_WALL_OFFSET_S to a negative offset\n");
    return 2;
  }
  const absl::Duration wait = absl::Milliseconds(300);
  // The control: Abseil's timed wait is skewed by the faked wall clock.
  {
    absl::Mutex mu;
    bool never = false;
    absl::MutexLock lock(&mu);
    const shardd::MonoTime start = shardd::MonoNow();
    mu.AwaitWithTimeout(absl::Condition(&never), wait);
    const absl::Duration took = shardd::MonoNow() - start;
    Expect(took < wait / 2,
           "control: absl::Mutex::AwaitWithTimeout returns early under the "
           "offset (else the offset is not in force)",
           took);
  }
  {
    absl::Mutex mu;
    bool never = false;
    absl::MutexLock lock(&mu);
    const shardd::MonoTime start = shardd::MonoNow();
    const bool held =
        shardd::AwaitUntil(&mu, absl::Condition(&never), start + wait);
    const absl::Duration took = shardd::MonoNow() - start;
    Expect(!held && took >= wait && took < wait + absl::Seconds(2),
           "AwaitUntil waits its monotonic deadline", took);
  }
  {
    shardd::MonoNotification n;
    const shardd::MonoTime start = shardd::MonoNow();
    const bool notified = n.WaitFor(wait);
    const absl::Duration took = shardd::MonoNow() - start;
    Expect(!notified && took >= wait && took < wait + absl::Seconds(2),
           "MonoNotification::WaitFor waits its monotonic timeout", took);
  }
  {
    const shardd::MonoTime start = shardd::MonoNow();
    shardd::SleepUntil(start + wait);
    const absl::Duration took = shardd::MonoNow() - start;
    Expect(took >= wait && took < wait + absl::Seconds(2),
           "SleepUntil keeps the monotonic schedule", took);
  }
  return failures == 0 ? 0 : 1;
}
