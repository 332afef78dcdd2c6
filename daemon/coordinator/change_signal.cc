#include "daemon/coordinator/change_signal.h"

#include <algorithm>
#include <chrono>

namespace shardd::coordinator {
namespace {

// MonoTime counts from the steady clock's origin (daemon/core/mono_time.h).
std::chrono::steady_clock::time_point SteadyPoint(MonoTime t) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          absl::ToChronoNanoseconds(t.SinceOrigin())));
}

}  // namespace

void ChangeSignal::Publish(int64_t any, int64_t scoped) {
  bool any_moved = false;
  bool scoped_moved = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    any_moved = any > versions_.any;
    scoped_moved = scoped > versions_.scoped;
    versions_.any = std::max(versions_.any, any);
    versions_.scoped = std::max(versions_.scoped, scoped);
  }
  if (any_moved) any_moved_.notify_all();
  if (scoped_moved) scoped_moved_.notify_all();
}

void ChangeSignal::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    versions_.shut_down = true;
  }
  any_moved_.notify_all();
  scoped_moved_.notify_all();
}

ChangeSignal::Versions ChangeSignal::Await(bool scoped, int64_t seen,
                                           MonoTime deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto moved = [&] {
    return versions_.shut_down ||
           (scoped ? versions_.scoped : versions_.any) > seen;
  };
  std::condition_variable& cv = scoped ? scoped_moved_ : any_moved_;
  if (deadline == MonoTime::InfiniteFuture()) {
    cv.wait(lock, moved);
  } else if (deadline > MonoNow()) {
    cv.wait_until(lock, SteadyPoint(deadline), moved);
  }
  return versions_;
}

ChangeSignal::Versions ChangeSignal::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return versions_;
}

}  // namespace shardd::coordinator
