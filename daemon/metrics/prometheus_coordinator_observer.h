#ifndef SHARDD_DAEMON_METRICS_PROMETHEUS_COORDINATOR_OBSERVER_H_
#define SHARDD_DAEMON_METRICS_PROMETHEUS_COORDINATOR_OBSERVER_H_

#include <cstdint>
#include <functional>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/metrics/bounded_series.h"
#include "daemon/metrics/coordinator_observer.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace shardd::metrics {

// The coordinator's metrics (the shardd_coordinator_* names of
// docs/metrics.md) as Prometheus counters, gauges and histograms on a
// registry.
//
// Every family, and every series with a known label value, is registered
// at construction, so a scrape shows them (at zero) before the first event
// and a query such as increase(shardd_coordinator_failures_detected_total
// [5m]) sees the first failure. Recovery phase durations are a histogram
// in seconds, 0.1 s .. 600 s. JobFailed's reason is free text and not a
// label (it would make a series per message): the gauge only says that the
// job failed, GetClusterState and the coordinator's log say why.
//
// When the committed step last advanced is a *_timestamp_seconds gauge
// (wall time, read by Prometheus' time()); before the first step it is
// this object's construction, i.e. the coordinator's start, so that the
// stall alert also covers a job that never commits.
//
// Thread-safe and non-blocking (prometheus-cpp metrics are), as
// CoordinatorObserver requires. Borrows the registry, which must outlive
// this object.
class PrometheusCoordinatorObserver : public CoordinatorObserver {
 public:
  // `now` is the wall clock (tests pass their own).
  explicit PrometheusCoordinatorObserver(
      prometheus::Registry& registry,
      std::function<absl::Time()> now = absl::Now);
  ~PrometheusCoordinatorObserver() override;

  PrometheusCoordinatorObserver(const PrometheusCoordinatorObserver&) = delete;
  PrometheusCoordinatorObserver& operator=(
      const PrometheusCoordinatorObserver&) = delete;

  void EpochChanged(int64_t epoch, bool ready) override;
  void Members(int live, int expected) override;
  void CommittedStep(int64_t step) override;
  void MemberFailed(absl::string_view cause) override;
  void FailureReport(absl::string_view result) override;
  void RecoveryStarted() override;
  void RecoveryCompleted() override;
  void RecoveryPhase(absl::string_view phase, absl::Duration d) override;
  void ShardsWithoutReplica(int n) override;
  void BrokenPeerLinks(int n) override;
  void CheckpointFallback() override;
  void LeaseExpiryDeferred() override;
  void CoordinatorStalled() override;
  void CommitVote(absl::string_view decision) override;
  void Lease(absl::Duration lease) override;
  void StallAlertAfter(absl::Duration after) override;
  void JobFailed(bool failed, absl::string_view reason) override;
  void InsecureEndpoints(int n) override;

 private:
  prometheus::Gauge* epoch_;
  prometheus::Gauge* ready_;
  prometheus::Gauge* members_live_;
  prometheus::Gauge* members_expected_;
  prometheus::Gauge* committed_step_;
  BoundedSeries<prometheus::Counter> failures_detected_;
  BoundedSeries<prometheus::Counter> failure_reports_;
  prometheus::Counter* recoveries_started_;
  prometheus::Counter* recoveries_completed_;
  BoundedSeries<prometheus::Histogram> recovery_duration_;
  // The whole recovery (RecoveryPhase(labels::kTotal, ...)).
  prometheus::Histogram* recovery_total_;
  prometheus::Gauge* shards_without_replica_;
  prometheus::Gauge* broken_peer_links_;
  prometheus::Counter* checkpoint_fallbacks_;
  prometheus::Counter* lease_expiry_deferrals_;
  prometheus::Counter* stalls_;
  BoundedSeries<prometheus::Counter> commit_votes_;
  prometheus::Gauge* lease_;
  prometheus::Gauge* stall_alert_after_;
  const std::function<absl::Time()> now_;
  // The highest committed step seen, and (the gauge) when it was first
  // seen; step_mu_ makes the compare and the two sets one step.
  absl::Mutex step_mu_;
  int64_t last_step_ ABSL_GUARDED_BY(step_mu_) = 0;
  prometheus::Gauge* last_step_time_ ABSL_GUARDED_BY(step_mu_);
  prometheus::Gauge* job_failed_;
  prometheus::Gauge* insecure_endpoints_;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_PROMETHEUS_COORDINATOR_OBSERVER_H_
