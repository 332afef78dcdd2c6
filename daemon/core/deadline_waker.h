#ifndef SHARDD_DAEMON_CORE_DEADLINE_WAKER_H_
#define SHARDD_DAEMON_CORE_DEADLINE_WAKER_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd {

// Blocks until `cond` holds or the monotonic `deadline` passes, and returns
// whether `cond` holds. `mu` must be held; it is released while waiting and
// held again on return, as with absl::Mutex::Await.
//
// Why not absl::Mutex::AwaitWithDeadline: the Abseil we build against
// (20220623) turns every timed wait (Mutex, CondVar, Notification) into an
// absolute CLOCK_REALTIME futex wait, so a wall-clock step stretches or cuts
// it: a step back of 60 s keeps a heartbeat thread asleep for 60 s. Here the
// wait has no timeout; its condition also says "the deadline passed" on the
// monotonic clock, and DeadlineWaker touches `mu` at the deadline, which
// makes Abseil evaluate the condition again.
bool AwaitUntil(absl::Mutex* mu, const absl::Condition& cond, MonoTime deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// Sleeps until the monotonic `deadline`, unaffected by wall-clock steps
// (absl::SleepFor is relative too; this is for loops that keep a schedule).
void SleepUntil(MonoTime deadline);

// The thread behind AwaitUntil: at each scheduled monotonic deadline it
// releases the waiter's mutex once (TryLock then Unlock, or, where another
// thread holds the mutex, that thread's Unlock does it), so that the
// waiter's condition is evaluated again. It never blocks on a waiter's
// mutex. Thread-safe. The mutexes given to Schedule are not owned; Cancel
// guarantees the waker is done with one before its waiter returns.
class DeadlineWaker {
 public:
  using Ticket = uint64_t;

  DeadlineWaker();
  ~DeadlineWaker();
  DeadlineWaker(const DeadlineWaker&) = delete;
  DeadlineWaker& operator=(const DeadlineWaker&) = delete;

  // The process's waker, started on first use and never destroyed.
  static DeadlineWaker& Default();

  Ticket Schedule(MonoTime at, absl::Mutex* mu);
  // Called with `mu` held, after the waiter woke. If the waker is touching
  // `mu` at this moment, releases `mu` until it is done, then takes it again.
  void Cancel(Ticket ticket, absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

 private:
  void Run();

  std::mutex m_;
  std::condition_variable cv_;       // The schedule changed.
  std::condition_variable done_cv_;  // A firing ended.
  bool stop_ = false;
  Ticket next_ticket_ = 1;
  Ticket firing_ = 0;
  std::set<std::pair<absl::Duration, Ticket>> queue_;
  std::map<Ticket, std::pair<absl::Duration, absl::Mutex*>> entries_;
  std::thread thread_;
};

}  // namespace shardd

#endif  // SHARDD_DAEMON_CORE_DEADLINE_WAKER_H_
