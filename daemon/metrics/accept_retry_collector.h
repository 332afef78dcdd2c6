#ifndef SHARDD_DAEMON_METRICS_ACCEPT_RETRY_COLLECTOR_H_
#define SHARDD_DAEMON_METRICS_ACCEPT_RETRY_COLLECTOR_H_

#include <functional>
#include <memory>
#include <vector>

#include "daemon/rpc/accept_pacer.h"
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
//     descriptors (or socket memory) and were retried;
// and the metrics endpoint's own (rpc::AcceptPacer):
//   shardd_accept_paced_total (counter): its accepts that failed so and
//     were retried after a pause.
// With process_open_fds and process_max_fds they tell an operator that a
// process ran out, and when it recovered.
//
// Thread-safe if the count functions are (AcceptRetry::counts and
// AcceptPacer::counts are). Never throws.
class AcceptRetryCollector : public prometheus::Collectable {
 public:
  AcceptRetryCollector(std::function<rpc::AcceptRetry::Counts()> retry,
                       std::function<rpc::AcceptPacer::Counts()> pacer);

  // The collector of AcceptRetry::Process() and AcceptPacer::Process().
  static std::shared_ptr<AcceptRetryCollector> ForThisProcess();

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<rpc::AcceptRetry::Counts()> retry_;
  std::function<rpc::AcceptPacer::Counts()> pacer_;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_ACCEPT_RETRY_COLLECTOR_H_
