#include "daemon/coordinator/concurrency_limit.h"

#include <chrono>

namespace shardd::coordinator {

bool ConcurrencyLimit::Acquire(MonoTime deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto available = [this] { return free_ > 0; };
  if (deadline == MonoTime::InfiniteFuture()) {
    freed_.wait(lock, available);
  } else {
    // MonoTime counts from the steady clock's origin.
    const auto until = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            absl::ToChronoNanoseconds(deadline.SinceOrigin())));
    if (!freed_.wait_until(lock, until, available)) return false;
  }
  --free_;
  return true;
}

void ConcurrencyLimit::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++free_;
  }
  freed_.notify_one();
}

}  // namespace shardd::coordinator
