#include "daemon/metrics/scrape_recorder.h"

#include <algorithm>
#include <utility>

namespace shardd::metrics {

ScrapeRecorder::ScrapeRecorder(std::shared_ptr<prometheus::Collectable> inner,
                               Clock* clock)
    : inner_(std::move(inner)), clock_(clock) {}

std::vector<prometheus::MetricFamily> ScrapeRecorder::Collect() const {
  // The start is read before the inner values: a collection that began
  // after a value was set has read it.
  const MonoTime start = clock_->MonotonicNow();
  std::vector<prometheus::MetricFamily> families =
      inner_ == nullptr ? std::vector<prometheus::MetricFamily>()
                        : inner_->Collect();
  absl::MutexLock lock(&mu_);
  // Two scrapes at once may complete out of order: keep the later start.
  last_start_ = std::max(last_start_, start);
  ++collections_;
  return families;
}

MonoTime ScrapeRecorder::LastCollectionStart() const {
  absl::MutexLock lock(&mu_);
  return last_start_;
}

int64_t ScrapeRecorder::collections() const {
  absl::MutexLock lock(&mu_);
  return collections_;
}

}  // namespace shardd::metrics
