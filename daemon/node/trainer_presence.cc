#include "daemon/node/trainer_presence.h"

#include <algorithm>

namespace shardd::node {

void TrainerPresence::Registered() {
  const MonoTime now = clock_->MonotonicNow();
  absl::MutexLock lock(&mu_);
  attached_ = true;
  last_call_ = now;
}

void TrainerPresence::Called() {
  const MonoTime now = clock_->MonotonicNow();
  absl::MutexLock lock(&mu_);
  // A call before any registration (refused as "no model registered") is
  // no trainer attached.
  if (attached_) last_call_ = std::max(last_call_, now);
}

v1::TrainerPresence TrainerPresence::Report() const {
  const MonoTime now = clock_->MonotonicNow();
  v1::TrainerPresence report;
  absl::MutexLock lock(&mu_);
  report.set_attached(attached_);
  if (attached_) {
    report.set_quiet_ms(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(now - last_call_)));
  }
  return report;
}

}  // namespace shardd::node
