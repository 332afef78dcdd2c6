// Prints how long (monotonic milliseconds) an abseil CondVar wait with a
// timeout of argv[1] ms took. clock_step_test runs it under libfaketime
// with the wall clock ahead and behind, with and without
// futex_clock_shim, to show which waits the faked clock skews.
#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s TIMEOUT_MS\n", argv[0]);
    return 2;
  }
  const absl::Duration timeout = absl::Milliseconds(std::atoi(argv[1]));
  absl::Mutex mu;
  absl::CondVar cv;
  const shardd::MonoTime start = shardd::MonoNow();
  {
    absl::MutexLock lock(&mu);
    cv.WaitWithTimeout(&mu, timeout);  // nothing signals it
  }
  std::printf("%lld\n", static_cast<long long>(absl::ToInt64Milliseconds(
                            shardd::MonoNow() - start)));
  return 0;
}
