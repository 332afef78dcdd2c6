#ifndef SHARDD_DAEMON_METRICS_SCRAPE_RECORDER_H_
#define SHARDD_DAEMON_METRICS_SCRAPE_RECORDER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/clock.h"
#include "daemon/core/mono_time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace shardd::metrics {

// Serves another collectable (a registry) unchanged and remembers when its
// newest completed collection began, so that a process can tell whether
// /metrics has been read since something happened: the coordinator of a
// failed job holds its exit until a scrape has read
// shardd_coordinator_job_failed = 1, or the SharddJobFailed alert may never
// see it. A collection that began at or after time t read every value set
// before t; one still running when asked does not count yet.
//
// Thread-safe: Collect runs on the HTTP server's threads while the owner
// asks. Shares ownership of the inner collectable; the clock must outlive
// it.
class ScrapeRecorder final : public prometheus::Collectable {
 public:
  ScrapeRecorder(std::shared_ptr<prometheus::Collectable> inner, Clock* clock);

  // The inner collectable's families; then records the collection.
  std::vector<prometheus::MetricFamily> Collect() const override;

  // When the newest completed collection began; InfinitePast before any.
  MonoTime LastCollectionStart() const;
  // Completed collections so far.
  int64_t collections() const;

 private:
  const std::shared_ptr<prometheus::Collectable> inner_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  mutable MonoTime last_start_ ABSL_GUARDED_BY(mu_) = MonoTime::InfinitePast();
  mutable int64_t collections_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_SCRAPE_RECORDER_H_
