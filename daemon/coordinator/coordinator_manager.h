#ifndef SHARDD_DAEMON_COORDINATOR_COORDINATOR_MANAGER_H_
#define SHARDD_DAEMON_COORDINATOR_COORDINATOR_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/coordinator/change_signal.h"
#include "daemon/coordinator/commit_vote_table.h"
#include "daemon/coordinator/decision_log.h"
#include "daemon/coordinator/membership_table.h"
#include "daemon/coordinator/rendezvous_policy.h"
#include "daemon/coordinator/rendezvous_store.h"
#include "daemon/core/clock.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/coordinator_observer.h"

namespace shardd::coordinator {

// Asks a member directly whether it is alive (Peer.Probe with a short
// deadline). Called without the manager's lock held.
using Prober = std::function<ProbeResult(const std::string& peer_address)>;

// A consistent copy of the cluster for watchers, tools and tests.
struct ClusterSnapshot {
  // Increases with every change; watchers wait for it to move.
  int64_t version = 0;
  int64_t epoch = 0;
  bool ready = false;
  int64_t committed_step = 0;
  int world_size = 0;
  int sharding_factor = 0;
  absl::Duration lease;
  std::vector<SlotRecord> slots;
  // Most recent first, at most the number asked for.
  std::vector<Decision> decisions;
  // Why the last change happened ("rank 3 lease expired ...").
  std::string last_reason;
  // When the coordinator started, on the wall clock (for people).
  absl::Time started;
  // Both clocks read together when the snapshot was taken: the times above
  // are monotonic and mean something to people only as wall times.
  MonoTime mono_now;
  absl::Time wall_now = absl::UnixEpoch();
  absl::Time WallTimeOf(MonoTime t) const { return wall_now - (mono_now - t); }
  // By peer address (MembershipTable::quarantines).
  std::map<std::string, Quarantine> quarantines;
  // MembershipTable::broken_links.
  std::vector<std::pair<int, int>> broken_links;
  // The current epoch's plan, and the terminal state.
  EpochPlan plan;
  bool failed = false;
  std::string failure;
  // Slots held by live members, of all W.
  int live_members = 0;
};

// What a scoped watch stream is told (WatchMembershipRequest.scoped): the
// cluster's header and the slots whose holder changed since a version the
// stream saw. Built once per (since, version) and shared by every stream
// that asks the same.
struct MembershipChanges {
  // CoordinatorManager::scoped_version when built.
  int64_t version = 0;
  // True: snapshot.slots holds all W slots (the stream's first message).
  // False: only those whose holder changed after the version asked about:
  // live ones joined or were replaced, the others were removed or left.
  bool full = true;
  // Header and slots as above; no decisions, quarantines or links.
  ClusterSnapshot snapshot;
};

// What a heartbeat reply carries, without copying the whole cluster.
struct LeaseView {
  MonoTime lease_expiry;
  // The same on the wall clock, for the reply (people read it).
  absl::Time lease_expiry_wall;
  absl::Duration lease;
  int64_t epoch = 0;
  bool ready = false;
  // NewestCommonCheckpoint of the members now (-1: not known).
  int64_t common_checkpoint_step = -1;
};

struct CoordinatorOptions {
  MembershipOptions membership;
  // The job is expected to be ready within this of the coordinator starting;
  // past it, a decision records who is missing.
  absl::Duration join_timeout = absl::Minutes(5);
  // Told about epochs, members, removals (with their cause), failure-report
  // results, the committed step and the lease, under the manager's lock.
  // Optional (null: nothing reported); not owned, must outlive the manager.
  metrics::CoordinatorObserver* observer = nullptr;
  // --decision_log: every commit decision is recorded (and synced) before
  // any voter is answered, and the predecessor's last one settles its
  // in-doubt members' step at their re-join. Null: none (a coordinator that
  // dies with the only member that applied a commit loses it).
  std::shared_ptr<DecisionLog> decision_log;
};

// Owns the coordinator's state: the membership table, the rendezvous store
// and the watchers of both. The gRPC service is a thin adapter over it.
//
// Every membership decision is delegated to MembershipTable (pure); this
// class adds locking, the clock, the probe for failure reports, keeping the
// rendezvous store on the current epoch and waking watchers.
//
// Thread-safe. Borrows nothing: the clock and prober are owned.
class CoordinatorManager {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorManager>> Create(
      const CoordinatorOptions& options, std::unique_ptr<Clock> clock,
      Prober prober);

  absl::StatusOr<JoinOutcome> Join(const JoinRequestInfo& request);
  // `unreachable`: the member's reachability report (see
  // MembershipTable::Heartbeat); members it finds cut off from their peers
  // are reported to the observer with cause peer_unreachable.
  // `lease_out`, when given, receives Lease(rank) read under the same lock
  // once the heartbeat was accepted (one lock for the reply, not two).
  absl::Status Heartbeat(int rank, const std::string& lease_token,
                         int64_t epoch, int64_t committed_step,
                         MemberPhase state,
                         std::vector<UnreachablePeer> unreachable = {},
                         const CheckpointInventory* checkpoints = nullptr,
                         LeaseView* lease_out = nullptr,
                         const TrainerReport* trainer = nullptr,
                         bool registration_state = false);
  absl::Status Leave(int rank, const std::string& lease_token,
                     const std::string& reason);
  absl::StatusOr<ReportOutcome> ReportFailure(int reporter,
                                              const std::string& lease_token,
                                              int64_t epoch, int suspect,
                                              const std::string& detail);

  // The commit vote (Coordinator.ShouldCommit): records `vote` for (epoch,
  // step) and blocks until every member of the epoch has voted, then returns
  // the decision (the same for all). NOT_FOUND unless the voter is a live
  // member with this token; ABORTED when `epoch` is not the current epoch,
  // the epoch is not ready, or it changes while waiting; the table's
  // INVALID_ARGUMENT / FAILED_PRECONDITION for a bad step;
  // DEADLINE_EXCEEDED at `deadline`; UNAVAILABLE after Shutdown().
  absl::StatusOr<CommitDecision> ShouldCommit(int64_t epoch, int64_t step,
                                              const CommitVote& vote,
                                              const std::string& lease_token,
                                              MonoTime deadline);

  // Expires leases due by now; returns when the next one is due. The
  // coordinator's lease thread calls it; tests call it with a fake clock.
  MonoTime Tick();

  ClusterSnapshot Snapshot(int max_decisions = 100) const;

  // The snapshot of the current version without decisions, copied once per
  // version and shared by every full watch stream (a copy of all W slots
  // per watcher per change was most of the coordinator's time).
  std::shared_ptr<const ClusterSnapshot> SharedSnapshot() const;
  // W, fixed for the coordinator's life (no lock).
  int world_size() const { return options_.membership.world_size; }

  // For scoped watch streams: the changes after scoped version `since`
  // (-1: the stream's first message, every slot). Shared per (since,
  // current version).
  std::shared_ptr<const MembershipChanges> ChangesSince(int64_t since) const;

  // A scoped stream's first message for `rank`: the header and the slots
  // of its shard group and replica group only (-1: every slot), copied in
  // O(F + W/F), not O(W) (full: true).
  std::shared_ptr<const MembershipChanges> ScopedSnapshot(int rank) const;

  // The member `rank` as a Join reply shows it, with the cluster's header
  // (slots: that slot only, unless `all_slots`): O(1) without all_slots.
  ClusterSnapshot JoinView(int rank, bool all_slots) const;

  // Blocks until the version (`scoped`: the scoped wake counter, which
  // moves when a scoped stream's header changes: epoch, readiness, plan,
  // job state) exceeds `seen`, the deadline passes, or Shutdown(); returns
  // both either way. Waits on the ChangeSignal, not on the manager's mutex.
  // A holder change alone (a join while the job forms) wakes no scoped
  // stream: it rides with the stream's next message or keepalive, so that
  // W joins do not wake W streams each.
  ChangeSignal::Versions AwaitVersion(bool scoped, int64_t seen,
                                      MonoTime deadline) const;

  // The lease of `rank` (which must be in range) and the epoch: O(W) reads,
  // no copies, for the heartbeat path (Snapshot copies every slot).
  LeaseView Lease(int rank) const;

  // Blocks until the snapshot's version exceeds `seen_version`, the
  // deadline passes, or Shutdown(); returns the current snapshot either way
  // (the caller compares versions to tell a change from a keepalive).
  ClusterSnapshot AwaitChange(int64_t seen_version, MonoTime deadline) const;

  // The rendezvous store as members use it (Coordinator.Rendezvous*). The
  // caller is the live member holding `lease_token`; AuthorizeRendezvous
  // decides what it may do before the store is touched (UNAUTHENTICATED,
  // INVALID_ARGUMENT, PERMISSION_DENIED, each naming its rule), then the
  // store answers with its own codes (ABORTED for a stale epoch,
  // FAILED_PRECONDITION, ALREADY_EXISTS for a key set with another value,
  // NOT_FOUND, DEADLINE_EXCEEDED, ...). A refusal changes nothing. Keys are
  // write-once per epoch except model keys, which their owner may replace
  // (core::RendezvousKey::replaceable). Set and Get are decided and done
  // under the manager's lock, so a member removed meanwhile cannot slip a
  // write in; Wait is decided under it and waits without it (a removal
  // starts a new epoch, which ends the wait with ABORTED).
  absl::Status RendezvousSet(const std::string& lease_token, int64_t epoch,
                             const std::string& key, absl::string_view value,
                             bool if_absent);
  absl::StatusOr<std::string> RendezvousGet(const std::string& lease_token,
                                            int64_t epoch,
                                            const std::string& key);
  absl::StatusOr<std::vector<std::string>> RendezvousWait(
      const std::string& lease_token, int64_t epoch,
      const std::vector<std::string>& keys, MonoTime deadline);

  // The store itself, without authorisation: for tests and tools in the
  // coordinator's process.
  RendezvousStore& rendezvous() { return rendezvous_; }

  // Wakes every watcher and waiter; later calls fail with UNAVAILABLE.
  void Shutdown();
  bool shut_down() const;

  MonoTime Now() { return clock_->MonotonicNow(); }

 private:
  // A commit decided: recorded in options_.decision_log (a failure is
  // logged; the decision stands).
  void RecordCommit(int64_t epoch, int64_t step, uint64_t fingerprint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A re-joining member in doubt about the step recorded_ says the
  // predecessor committed (RecordedCommitSettles): the step is committed.
  void SettleRecordedCommit(const JoinRequestInfo& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  CoordinatorManager(const CoordinatorOptions& options, MembershipTable table,
                     std::unique_ptr<Clock> clock, Prober prober);

  // After the version moved: raises the scoped version when what a scoped
  // stream shows changed (the header, or a slot's holder among `ranks`;
  // all slots when `all_ranks`), then publishes both on signal_.
  void NoteVersion(const std::vector<int>& ranks, bool all_ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a scoped stream's header shows, for NoteVersion's comparison.
  struct ScopedHeader {
    int64_t epoch = -1;
    bool ready = false;
    bool failed = false;
    int64_t plan_epoch = -1;
    int plan_kind = -1;
    int64_t plan_step = -1;
    size_t plan_items = 0;
    bool operator==(const ScopedHeader&) const = default;
  };
  ScopedHeader CurrentScopedHeader() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The header fields of a snapshot (no slots, no decisions).
  void FillHeader(ClusterSnapshot& s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // After any call that may have changed the table. Members removed by the
  // call are reported to the observer with `removal_cause`.
  // `heartbeats_before`, when given, holds every slot's last heartbeat from
  // before the call (a Join overwrites the slot of the member it replaces).
  void Changed(int64_t epoch_before, size_t decisions_before,
               absl::string_view removal_cause = "other",
               const std::vector<MonoTime>* heartbeats_before = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the observer the epoch, readiness, live members and committed
  // step when they differ from what it was last told.
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Follows a failure through its recovery from the decisions log and
  // reports the phases' durations when the epoch is ready again:
  // detection (last heartbeat of the removed member -> removal),
  // awaiting_replacement (-> the replacement's join), rendezvous (-> every
  // other member READY in the epoch: their communicators, which include the
  // replacement's, are up), transfer (-> the epoch is ready: the
  // replacement copied its shard and reported READY) and total (the sum).
  void TrackRecovery(const Decision& d,
                     const std::vector<MonoTime>* heartbeats_before)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a heartbeat at `now` (the time the table was given): notes the
  // end of a recovery's rendezvous phase when every live member but the
  // replacement is READY in the current epoch.
  void NoteRendezvous(MonoTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct RecoveryTimes {
    bool active = false;   // A member was removed; not ready since.
    bool planned = false;  // A replacement joined and must copy a shard.
    int replacement = -1;  // Its rank, once planned.
    bool rendezvous_done = false;
    MonoTime last_alive;
    MonoTime removed;
    MonoTime joined;
    MonoTime rendezvous;  // When rendezvous_done became true.
  };
  RecoveryTimes recovery_ ABSL_GUARDED_BY(mu_);
  int64_t published_fallbacks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t published_deferrals_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t published_stalls_ ABSL_GUARDED_BY(mu_) = 0;
  int published_without_replica_ ABSL_GUARDED_BY(mu_) = -1;
  int published_broken_links_ ABSL_GUARDED_BY(mu_) = -1;
  bool published_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::string NewLeaseToken() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AuthorizeRendezvous for the member holding `lease_token` now.
  absl::Status AuthorizeRendezvousLocked(
      RendezvousAccess access, const std::string& lease_token,
      absl::Span<const std::string> keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  const std::unique_ptr<Clock> clock_;
  const Prober prober_;
  const MonoTime started_;
  const absl::Time started_wall_;
  RendezvousStore rendezvous_;

  mutable absl::Mutex mu_;
  MembershipTable table_ ABSL_GUARDED_BY(mu_);
  // The predecessor's last commit (options_.decision_log), until it settled
  // an in-doubt member or this coordinator decided a step.
  std::optional<DecisionLog::Commit> recorded_ ABSL_GUARDED_BY(mu_);
  CommitVoteTable votes_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t decisions_logged_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t token_counter_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t token_salt_ ABSL_GUARDED_BY(mu_) = 0;
  bool join_timeout_reported_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // What the observer was last told (-1: nothing yet).
  int64_t published_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  int published_ready_ ABSL_GUARDED_BY(mu_) = -1;
  int published_live_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t published_step_ ABSL_GUARDED_BY(mu_) = -1;
  // decisions_total when Publish last counted live members and holders.
  int64_t published_decisions_ ABSL_GUARDED_BY(mu_) = -1;
  int live_members_ ABSL_GUARDED_BY(mu_) = 0;

  // Scoped streams: their version, what they were last shown, and when
  // each slot's holder last changed (scoped version).
  int64_t scoped_version_ ABSL_GUARDED_BY(mu_) = 0;
  // Header changes only: what scoped streams wake for.
  int64_t scoped_wake_ ABSL_GUARDED_BY(mu_) = 0;
  ScopedHeader scoped_header_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> scoped_holder_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> holder_changed_at_ ABSL_GUARDED_BY(mu_);
  // Built on demand, for the current version only.
  mutable std::shared_ptr<const ClusterSnapshot> shared_snapshot_
      ABSL_GUARDED_BY(mu_);
  mutable std::map<int64_t, std::shared_ptr<const MembershipChanges>>
      changes_cache_ ABSL_GUARDED_BY(mu_);
  mutable int64_t changes_cache_version_ ABSL_GUARDED_BY(mu_) = -1;
  ChangeSignal signal_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_COORDINATOR_MANAGER_H_
