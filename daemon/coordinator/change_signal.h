#ifndef SHARDD_DAEMON_COORDINATOR_CHANGE_SIGNAL_H_
#define SHARDD_DAEMON_COORDINATOR_CHANGE_SIGNAL_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

// Tells the coordinator's watch streams that the cluster changed, apart
// from the manager's mutex.
//
// Responsibility: two version counters, published by the manager after a
// change (`any`: whatever a full WatchMembership update shows; `scoped`:
// what a scoped stream shows, see WatchMembershipRequest.scoped), and
// waits for either to move. A watch stream sleeps here, not on the
// manager's mutex: an absl::Mutex evaluates every waiter's condition at
// every unlock, which made each heartbeat cost O(watchers). Here a change
// wakes only the waiters of the counter that moved (one condition variable
// each), and the wait's deadline is on the monotonic clock
// (std::condition_variable over steady_clock).
//
// Thread-safe. Owns nothing but its counters.
class ChangeSignal {
 public:
  struct Versions {
    int64_t any = 0;
    int64_t scoped = 0;
    bool shut_down = false;
  };

  // Raises the counters to `any` and `scoped` (they never go back) and
  // wakes the waiters of those that moved.
  void Publish(int64_t any, int64_t scoped);
  // Wakes every waiter; later waits return at once with shut_down set.
  void Shutdown();
  // Blocks until the `scoped` (or `any`) counter exceeds `seen`, shutdown,
  // or the deadline; returns the counters either way.
  Versions Await(bool scoped, int64_t seen, MonoTime deadline) const;
  Versions Current() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable any_moved_;
  mutable std::condition_variable scoped_moved_;
  Versions versions_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_CHANGE_SIGNAL_H_
