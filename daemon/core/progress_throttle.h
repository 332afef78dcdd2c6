#ifndef SHARDD_DAEMON_CORE_PROGRESS_THROTTLE_H_
#define SHARDD_DAEMON_CORE_PROGRESS_THROTTLE_H_

#include <cstdint>

#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd {

// Decides which byte counts of one transfer in progress are worth an event,
// so that a watcher sees a multi-GB copy move without the event log taking
// one event per chunk: the first reading (0 when the total has just become
// known), then a reading only when both `min_interval` has passed and at
// least 1/`max_reports` of the total has arrived since the last reported
// one (whichever is rarer). So one transfer gives at most max_reports + 1
// reports however small its chunks are and at most one per min_interval
// however fast it runs, and the reported counts strictly increase.
// Readings that do not increase, or exceed the total, are never reported.
// A retried transfer takes a new throttle: its counts start again from 0.
//
// Pure: the caller passes the (monotonic) time of each reading. A value
// type; thread-compatible.
class ProgressThrottle {
 public:
  struct Options {
    absl::Duration min_interval = absl::Milliseconds(250);
    // Values below 1 count as 1.
    int max_reports = 16;
  };

  // `total_bytes` < 0 counts as 0 (only the first reading, 0, is reported).
  explicit ProgressThrottle(int64_t total_bytes);
  ProgressThrottle(int64_t total_bytes, Options options);

  // True when `done` bytes at `now` should be reported; the throttle then
  // counts it as the last report.
  bool ShouldReport(int64_t done, MonoTime now);

  int64_t total_bytes() const { return total_; }
  // The fewest new bytes between two reports: ceil(total / max_reports),
  // at least 1.
  int64_t step_bytes() const { return step_; }
  // Reports given so far.
  int reports() const { return reports_; }

 private:
  int64_t total_;
  absl::Duration min_interval_;
  int64_t step_;
  int reports_ = 0;
  int64_t last_done_ = 0;
  MonoTime last_time_;
};

}  // namespace shardd

#endif  // SHARDD_DAEMON_CORE_PROGRESS_THROTTLE_H_
