#include "daemon/core/progress_throttle.h"

#include <algorithm>

namespace shardd {

ProgressThrottle::ProgressThrottle(int64_t total_bytes)
    : ProgressThrottle(total_bytes, Options()) {}

ProgressThrottle::ProgressThrottle(int64_t total_bytes, Options options)
    : total_(std::max<int64_t>(total_bytes, 0)),
      min_interval_(std::max(options.min_interval, absl::ZeroDuration())) {
  const int64_t parts = std::max(options.max_reports, 1);
  step_ = std::max<int64_t>((total_ + parts - 1) / parts, 1);
}

bool ProgressThrottle::ShouldReport(int64_t done, MonoTime now) {
  if (done < 0 || done > total_) return false;
  if (reports_ > 0 &&
      (done - last_done_ < step_ || now - last_time_ < min_interval_)) {
    return false;
  }
  ++reports_;
  last_done_ = done;
  last_time_ = now;
  return true;
}

}  // namespace shardd
