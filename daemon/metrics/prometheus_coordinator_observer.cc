#include "daemon/metrics/prometheus_coordinator_observer.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace shardd::metrics {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;
using prometheus::Registry;
namespace labels = coordinator_labels;

// 0.1 s .. 600 s: detection alone is about a lease (1.5 s by default); a
// replacement pod can take minutes to be scheduled.
const Histogram::BucketBoundaries& RecoveryBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
  return *b;
}

Counter* NewCounter(Registry& registry, const std::string& name,
                    const std::string& help) {
  return &prometheus::BuildCounter()
              .Name(name)
              .Help(help)
              .Register(registry)
              .Add({});
}

Gauge* NewGauge(Registry& registry, const std::string& name,
                const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(
      {});
}

BoundedSeries<Counter> NewCounters(Registry& registry, const std::string& name,
                                   const std::string& help,
                                   const std::string& label,
                                   std::vector<std::string> known) {
  auto& family =
      prometheus::BuildCounter().Name(name).Help(help).Register(registry);
  return BoundedSeries<Counter>(
      {label}, {std::move(known)},
      [&family](const Labels& l) -> Counter& { return family.Add(l); });
}

BoundedSeries<Histogram> NewRecoveryHistograms(Registry& registry) {
  auto& family = prometheus::BuildHistogram()
                     .Name("shardd_coordinator_recovery_duration_seconds")
                     .Help("Duration of each phase of a recovery.")
                     .Register(registry);
  return BoundedSeries<Histogram>(
      {"phase"},
      {{labels::kDetection, labels::kAwaitingReplacement, labels::kTransfer,
        labels::kRendezvous}},
      [&family](const Labels& l) -> Histogram& {
        return family.Add(l, RecoveryBuckets());
      });
}

}  // namespace

PrometheusCoordinatorObserver::PrometheusCoordinatorObserver(
    prometheus::Registry& registry, std::function<absl::Time()> now)
    : failures_detected_(
          NewCounters(registry, "shardd_coordinator_failures_detected_total",
                      "Members removed as failed, by cause.", "cause",
                      {labels::kLeaseExpired, labels::kCollectiveFailed,
                       labels::kCollectiveTimeout, labels::kPeerUnreachable,
                       labels::kTransferFailed, labels::kProcessExited})),
      failure_reports_(
          NewCounters(registry, "shardd_coordinator_failure_reports_total",
                      "Fast-path failure reports, by result.", "result",
                      {labels::kRemoved, labels::kDismissed, labels::kStale})),
      recovery_duration_(NewRecoveryHistograms(registry)),
      // The whole recovery is a histogram of its own: as a fifth phase of
      // the one above, sum() over phases would count every recovery twice.
      recovery_total_(&prometheus::BuildHistogram()
                           .Name("shardd_coordinator_recovery_seconds")
                           .Help("Duration of a whole recovery (failure to "
                                 "ready epoch; the phases add up to it).")
                           .Register(registry)
                           .Add({}, RecoveryBuckets())),
      commit_votes_(
          NewCounters(registry, "shardd_coordinator_commit_votes_total",
                      "ShouldCommit decisions, by decision.", "decision",
                      {labels::kCommit, labels::kReject, labels::kAborted})),
      now_(std::move(now)) {
  epoch_ = NewGauge(registry, "shardd_coordinator_membership_epoch",
                    "The current membership epoch.");
  ready_ = NewGauge(registry, "shardd_coordinator_ready",
                    "1 when the current epoch is ready, else 0.");
  members_live_ = NewGauge(registry, "shardd_coordinator_members_live",
                           "Live members (joining, recovering or ready).");
  members_expected_ = NewGauge(registry, "shardd_coordinator_members_expected",
                               "Members the job needs (the world size W).");
  committed_step_ = NewGauge(registry, "shardd_coordinator_committed_step",
                             "The cluster's committed step.");
  recoveries_started_ =
      NewCounter(registry, "shardd_coordinator_recoveries_started_total",
                 "Recovery plans started (a replacement must copy a shard).");
  recoveries_completed_ =
      NewCounter(registry, "shardd_coordinator_recoveries_completed_total",
                 "Recoveries that reached a ready epoch.");
  shards_without_replica_ = NewGauge(
      registry, "shardd_coordinator_shards_without_replica",
      "Shard indices no live member holds (only a checkpoint can restore "
      "them).");
  broken_peer_links_ = NewGauge(
      registry, "shardd_coordinator_broken_peer_links",
      "Links between live members that both ends report unreachable (a "
      "network partition between nodes).");
  checkpoint_fallbacks_ =
      NewCounter(registry, "shardd_coordinator_checkpoint_fallbacks_total",
                 "Recoveries that had to use a checkpoint.");
  lease_expiry_deferrals_ = NewCounter(
      registry, "shardd_coordinator_lease_expiry_deferrals_total",
      "Spells in which the coordinator, with many members late at once, "
      "judged itself behind and held expired leases back.");
  stalls_ = NewCounter(
      registry, "shardd_coordinator_stalls_total",
      "Times the coordinator found it had not run for more than twice its "
      "lease-check period (stopped, frozen, starved) and renewed the leases "
      "that ran out meanwhile instead of removing their members.");
  lease_ = NewGauge(registry, "shardd_coordinator_lease_seconds",
                    "The lease members must renew within, in seconds.");
  stall_alert_after_ = NewGauge(
      registry, "shardd_coordinator_stall_alert_after_seconds",
      "How long the job may go without a committed step while members are "
      "live before SharddTrainingStalled fires (--stall_alert_after; 0: "
      "never).");
  {
    absl::MutexLock lock(&step_mu_);
    last_step_time_ = NewGauge(
        registry, "shardd_coordinator_last_step_timestamp_seconds",
        "Unix time the committed step last advanced (the coordinator's "
        "start before the first step); time() minus it is how long the job "
        "has gone without a step.");
    last_step_time_->Set(absl::ToDoubleSeconds(now_() - absl::UnixEpoch()));
  }
  insecure_endpoints_ = NewGauge(
      registry, "shardd_coordinator_insecure_endpoints",
      "gRPC endpoints of the coordinator that carry plaintext beyond its "
      "machine because it runs with --insecure (0 with TLS or loopback "
      "only).");
  job_failed_ = NewGauge(
      registry, "shardd_coordinator_job_failed",
      "1 once the job has failed (terminal: a shard lost with no live replica "
      "and no usable checkpoint, or epochs failing without progress), else "
      "0. The reason: GetClusterState job_failure, shardctl status, or the "
      "coordinator log line JOB_FAILED.");
}

PrometheusCoordinatorObserver::~PrometheusCoordinatorObserver() = default;

void PrometheusCoordinatorObserver::EpochChanged(int64_t epoch, bool ready) {
  epoch_->Set(static_cast<double>(epoch));
  ready_->Set(ready ? 1 : 0);
}

void PrometheusCoordinatorObserver::Members(int live, int expected) {
  members_live_->Set(live);
  members_expected_->Set(expected);
}

void PrometheusCoordinatorObserver::CommittedStep(int64_t step) {
  committed_step_->Set(static_cast<double>(step));
  // A step that went back (a restarted coordinator rebuilding its view)
  // is no progress; the rebuilt step after a restart counts as progress,
  // like the start itself.
  absl::MutexLock lock(&step_mu_);
  if (step <= last_step_) return;
  last_step_ = step;
  last_step_time_->Set(absl::ToDoubleSeconds(now_() - absl::UnixEpoch()));
}

void PrometheusCoordinatorObserver::MemberFailed(absl::string_view cause) {
  failures_detected_.Get({cause}).Increment();
}

void PrometheusCoordinatorObserver::FailureReport(absl::string_view result) {
  failure_reports_.Get({result}).Increment();
}

void PrometheusCoordinatorObserver::RecoveryStarted() {
  recoveries_started_->Increment();
}

void PrometheusCoordinatorObserver::RecoveryCompleted() {
  recoveries_completed_->Increment();
}

void PrometheusCoordinatorObserver::RecoveryPhase(absl::string_view phase,
                                                  absl::Duration d) {
  if (phase == labels::kTotal) {
    recovery_total_->Observe(absl::ToDoubleSeconds(d));
    return;
  }
  recovery_duration_.Get({phase}).Observe(absl::ToDoubleSeconds(d));
}

void PrometheusCoordinatorObserver::ShardsWithoutReplica(int n) {
  shards_without_replica_->Set(n);
}

void PrometheusCoordinatorObserver::BrokenPeerLinks(int n) {
  broken_peer_links_->Set(n);
}

void PrometheusCoordinatorObserver::CheckpointFallback() {
  checkpoint_fallbacks_->Increment();
}

void PrometheusCoordinatorObserver::LeaseExpiryDeferred() {
  lease_expiry_deferrals_->Increment();
}

void PrometheusCoordinatorObserver::CoordinatorStalled() {
  stalls_->Increment();
}

void PrometheusCoordinatorObserver::CommitVote(absl::string_view decision) {
  commit_votes_.Get({decision}).Increment();
}

void PrometheusCoordinatorObserver::Lease(absl::Duration lease) {
  lease_->Set(absl::ToDoubleSeconds(lease));
}

void PrometheusCoordinatorObserver::StallAlertAfter(absl::Duration after) {
  stall_alert_after_->Set(
      absl::ToDoubleSeconds(std::max(after, absl::ZeroDuration())));
}

void PrometheusCoordinatorObserver::InsecureEndpoints(int n) {
  insecure_endpoints_->Set(std::max(n, 0));
}

void PrometheusCoordinatorObserver::JobFailed(bool failed,
                                              absl::string_view /*reason*/) {
  job_failed_->Set(failed ? 1 : 0);
}

}  // namespace shardd::metrics
