#ifndef SHARDD_DAEMON_CORE_MONO_NOTIFICATION_H_
#define SHARDD_DAEMON_CORE_MONO_NOTIFICATION_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd {

// A one-shot event, like absl::Notification, whose timed waits run on the
// monotonic clock (absl::Notification's are wall-clock waits in the Abseil we
// build against: see AwaitUntil). Used as the stop signal of threads that
// keep a schedule. Thread-safe.
class MonoNotification {
 public:
  void Notify();
  bool HasBeenNotified() const;
  // True once notified; false when the deadline passed first.
  bool WaitUntil(MonoTime deadline) const;
  bool WaitFor(absl::Duration timeout) const {
    return WaitUntil(MonoNow() + timeout);
  }
  void Wait() const { WaitUntil(MonoTime::InfiniteFuture()); }

 private:
  mutable absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardd

#endif  // SHARDD_DAEMON_CORE_MONO_NOTIFICATION_H_
