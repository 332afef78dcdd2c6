#include "daemon/core/mono_notification.h"

#include "daemon/core/deadline_waker.h"

namespace shardd {

void MonoNotification::Notify() {
  absl::MutexLock lock(&mu_);
  notified_ = true;
}

bool MonoNotification::HasBeenNotified() const {
  absl::MutexLock lock(&mu_);
  return notified_;
}

bool MonoNotification::WaitUntil(MonoTime deadline) const {
  absl::MutexLock lock(&mu_);
  return AwaitUntil(&mu_, absl::Condition(&notified_), deadline);
}

}  // namespace shardd
