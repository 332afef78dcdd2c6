#include "daemon/node/event_log.h"

#include <utility>

#include "absl/time/clock.h"
#include "daemon/core/deadline_waker.h"

namespace shardd::node {

int64_t EventLog::Append(v1::TrainerEvent event) {
  absl::MutexLock lock(&mu_);
  event.set_sequence(++last_);
  event.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  events_.push_back(std::move(event));
  while (events_.size() > capacity_) events_.pop_front();
  return last_;
}

bool EventLog::WaitAfter(int64_t after, MonoTime deadline,
                         std::vector<v1::TrainerEvent>* out) const {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || last_ > after;
  };
  AwaitUntil(&mu_, absl::Condition(&ready), deadline);
  for (const v1::TrainerEvent& e : events_) {
    if (e.sequence() > after) out->push_back(e);
  }
  return !closed_;
}

int64_t EventLog::oldest_sequence() const {
  absl::MutexLock lock(&mu_);
  return events_.empty() ? 0 : events_.front().sequence();
}

int64_t EventLog::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

void EventLog::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace shardd::node
