#ifndef SHARDD_DAEMON_METRICS_ACCEPT_RETRY_COLLECTOR_H_
#define SHARDD_DAEMON_METRICS_ACCEPT_RETRY_COLLECTOR_H_

#include <functional>
#include <memory>
#include <vector>

#include "daemon/rpc/accept_retry.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace shardd::metrics {

// The process's gRPC listeners' descriptor shortages (rpc::AcceptRetry) as
// metrics, read at each scrape, for both binaries:
//   shardd_accept_shortages_total (counter): shortages begun;
//   shardd_accept_shortages_open (gauge): listeners short right now (new
//     connections wait in their queues);
//   shardd_accept_deferred_total (counter): accepts that failed for want of
//     descriptors (or socket memory) and were retried.
// With process_open_fds and process_max_fds they tell an operator that a
// process ran out, and when it recovered.
//
// Thread-safe if `counts` is (AcceptRetry::counts is). Never throws.
class AcceptRetryCollector : public prometheus::Collectable {
 public:
  explicit AcceptRetryCollector(
      std::function<rpc::AcceptRetry::Counts()> counts);

  // The collector of AcceptRetry::Process().
  static std::shared_ptr<AcceptRetryCollector> ForThisProcess();

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<rpc::AcceptRetry::Counts()> counts_;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_ACCEPT_RETRY_COLLECTOR_H_
