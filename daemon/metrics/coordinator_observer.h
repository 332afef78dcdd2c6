#ifndef SHARDD_DAEMON_METRICS_COORDINATOR_OBSERVER_H_
#define SHARDD_DAEMON_METRICS_COORDINATOR_OBSERVER_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardd::metrics {

// Label values the coordinator passes to CoordinatorObserver
// (docs/metrics.md). An implementation records any other string as
// "other", so a typo cannot create an unbounded number of time series.
namespace coordinator_labels {
// MemberFailed cause (the FailureKind names, lower case).
inline constexpr char kLeaseExpired[] = "lease_expired";
inline constexpr char kCollectiveFailed[] = "collective_failed";
inline constexpr char kCollectiveTimeout[] = "collective_timeout";
inline constexpr char kPeerUnreachable[] = "peer_unreachable";
inline constexpr char kTransferFailed[] = "transfer_failed";
inline constexpr char kProcessExited[] = "process_exited";
// FailureReport result.
inline constexpr char kRemoved[] = "removed";
inline constexpr char kDismissed[] = "dismissed";
inline constexpr char kStale[] = "stale";
// RecoveryPhase phase.
inline constexpr char kDetection[] = "detection";
inline constexpr char kAwaitingReplacement[] = "awaiting_replacement";
inline constexpr char kTransfer[] = "transfer";
inline constexpr char kRendezvous[] = "rendezvous";
inline constexpr char kTotal[] = "total";
// CommitVote decision.
inline constexpr char kCommit[] = "commit";
inline constexpr char kReject[] = "reject";
inline constexpr char kAborted[] = "aborted";
}  // namespace coordinator_labels

// What the coordinator reports about the cluster, one method per event, so
// that CoordinatorManager stays free of any metrics library and is tested
// without a registry (inject nothing, or a recording fake).
//
// Every method has an empty default body: an implementation overrides what
// it needs. CoordinatorManager calls these with its lock held, so an
// implementation must be thread-safe, must not block and must never call
// back into the manager.
class CoordinatorObserver {
 public:
  virtual ~CoordinatorObserver() = default;

  // The current epoch, and whether it is ready (all W members READY).
  virtual void EpochChanged(int64_t /*epoch*/, bool /*ready*/) {}
  // Live members and W.
  virtual void Members(int /*live*/, int /*expected*/) {}
  // The cluster's committed step.
  virtual void CommittedStep(int64_t /*step*/) {}
  // A member was removed; cause: one of coordinator_labels' MemberFailed
  // causes (lease expiry, or the kind of the failure report).
  virtual void MemberFailed(absl::string_view /*cause*/) {}
  // A fast-path failure report was decided; result: removed (someone was
  // removed), dismissed (nobody was) or stale (an older epoch's report).
  virtual void FailureReport(absl::string_view /*result*/) {}
  // A recovery plan started (a replacement must copy a shard).
  virtual void RecoveryStarted() {}
  // A recovery reached a ready epoch.
  virtual void RecoveryCompleted() {}
  // How long one phase of a recovery took; phase: detection,
  // awaiting_replacement, transfer, rendezvous, total.
  virtual void RecoveryPhase(absl::string_view /*phase*/,
                             absl::Duration /*d*/) {}
  // Shard indices that no live member holds (only a checkpoint can
  // restore them).
  virtual void ShardsWithoutReplica(int /*n*/) {}
  // A recovery had to use a checkpoint.
  virtual void CheckpointFallback() {}
  // The coordinator found itself behind and held expired leases back (once
  // per spell; see DetectorOptions::behind_late_fraction).
  virtual void LeaseExpiryDeferred() {}
  // The coordinator had not run for a while and renewed the leases that
  // ran out meanwhile (see DetectorOptions::check_period).
  virtual void CoordinatorStalled() {}
  // A ShouldCommit decision: commit, reject or aborted.
  virtual void CommitVote(absl::string_view /*decision*/) {}
  // The lease members must renew within.
  virtual void Lease(absl::Duration /*lease*/) {}
  // How long the job may go without a committed step while members are
  // live before the stall alert fires (--stall_alert_after; 0: never). An
  // operator's setting the coordinator only reports, so that the alert
  // rule reads each job's own value.
  virtual void StallAlertAfter(absl::Duration /*after*/) {}
  // Links between live members that both ends report unreachable (a
  // network partition between nodes; 0 when none).
  virtual void BrokenPeerLinks(int /*n*/) {}
  // The job entered its terminal FAILED state (true) with this reason: a
  // shard lost without a usable checkpoint, or epochs failing without
  // progress. Called once with true; false is the initial state.
  virtual void JobFailed(bool /*failed*/, absl::string_view /*reason*/) {}
  // How many of the coordinator's gRPC endpoints carry plaintext beyond
  // this machine, allowed by --insecure (0: none).
  virtual void InsecureEndpoints(int /*n*/) {}
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_COORDINATOR_OBSERVER_H_
