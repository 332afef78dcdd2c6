#ifndef SHARDD_DAEMON_COORDINATOR_MEMBERSHIP_TABLE_H_
#define SHARDD_DAEMON_COORDINATOR_MEMBERSHIP_TABLE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/coordinator/epoch_plan.h"
#include "daemon/coordinator/failure_detector.h"
#include "daemon/coordinator/progress_watch.h"
#include "daemon/coordinator/trainer_sighting.h"
#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

enum class MemberPhase {
  kEmpty,       // No member has held the slot.
  kJoining,     // Joined this epoch; building communicators.
  kRecovering,  // A replacement copying its shard from a replica.
  kReady,       // Reported READY for the current epoch.
  kFailed,      // Removed: lease expired or failure confirmed.
  kLeft,        // Left gracefully.
};

absl::string_view MemberPhaseName(MemberPhase phase);

enum class DecisionKind {
  kMemberJoined,
  kJoinRejected,
  kMemberRemoved,
  kMemberLeft,
  kEpochStarted,
  kEpochReady,
  kRecoveryPlanned,
  kFailureReportDismissed,
  kUnrecoverable,
  kJoinTimeout,
  kCommitRejected,
  kPartitionUndecided,
  kEpochStalled,
  kJobFailed,
  // Lease expiry held back, or resumed, because the coordinator was behind
  // (see DetectorOptions::behind_late_fraction).
  kLeaseExpiryDeferred,
  // The coordinator did not run for a while (stopped, frozen, starved: see
  // DetectorOptions::check_period); leases that ran out meanwhile were
  // renewed once instead of expiring.
  kCoordinatorStalled,
};

absl::string_view DecisionKindName(DecisionKind kind);

// One entry of the decisions log: what the coordinator decided and why.
struct Decision {
  MonoTime time;
  int64_t epoch = 0;
  DecisionKind kind = DecisionKind::kEpochStarted;
  std::vector<int> ranks;
  std::string reason;
};

// A peer that a member could not reach: its Peer.Probe failed in each of
// the member's last `failed_probes` probes (the member decides how many make
// a report).
struct UnreachablePeer {
  int rank = 0;
  std::string incarnation;  // The process probed.
  int failed_probes = 0;
  std::string error;  // The last probe's.
};

// The sharded checkpoints a member keeps, as it reports them.
struct CheckpointInventory {
  // The member was started with --checkpoint_dir.
  bool keeps = false;
  // Steps of its checkpoint files whose every CRC it verified, ascending.
  std::vector<int64_t> steps;
  // What it found wrong (a corrupt or unreadable file), for reasons.
  std::string problem;
};

// One slot (rank).
struct SlotRecord {
  int rank = 0;
  MemberPhase phase = MemberPhase::kEmpty;
  std::string identity;
  std::string peer_address;
  std::string incarnation;
  std::string lease_token;
  // The joining process's secret (JoinRequestInfo::join_secret); like the
  // lease token, never shown to anyone.
  std::string join_secret;
  MonoTime joined = MonoTime::InfinitePast();
  MonoTime last_heartbeat = MonoTime::InfinitePast();
  MonoTime lease_expiry = MonoTime::InfinitePast();
  int64_t committed_step = 0;
  // The epoch for which the member last reported READY.
  int64_t ready_epoch = -1;
  // The member holds its shard of a registered model.
  bool holds_shard = false;
  uint64_t model_fingerprint = 0;
  // A previous holder of the slot held its shard (so a loss names it).
  bool held_by_predecessor = false;
  // An in-doubt step the member reported at its join (0: none).
  int64_t pending_step = 0;
  CheckpointInventory checkpoints;
  // The peers the member last reported unreachable (its latest heartbeat).
  std::vector<UnreachablePeer> unreachable;
  // What the member last reported of its trainer.
  TrainerSighting trainer;
  // Its shard is what registering the model made, nothing trained since
  // (PlanSlot::registration_state), as its join or last heartbeat said.
  bool registration_state = false;

  bool live() const {
    return phase == MemberPhase::kJoining ||
           phase == MemberPhase::kRecovering || phase == MemberPhase::kReady;
  }
};

struct MembershipOptions {
  int world_size = 1;       // W
  int sharding_factor = 1;  // F; must divide W.
  DetectorOptions detector;
  // Oldest decisions are dropped beyond this.
  size_t max_decisions = 1000;
  // A member removed as cut off from its peers cannot join again from the
  // same peer address for this long; each further removal from that
  // address doubles it, up to partition_quarantine_max.
  absl::Duration partition_quarantine = absl::Seconds(30);
  absl::Duration partition_quarantine_max = absl::Minutes(10);
  // When the coordinator started: a shard without a live holder is not
  // declared lost before started + rejoin_grace (members re-join a
  // restarted coordinator within about a lease), nor within rejoin_grace
  // of its last holder's removal (a hung holder may come back), unless
  // every slot is claimed. Zero grace: two leases.
  MonoTime started = MonoTime::InfinitePast();
  absl::Duration rejoin_grace = absl::ZeroDuration();
  // Epochs in a row that end without becoming ready while the same members
  // hold every slot (a failure report, or a READY at the wrong step) before
  // the job is declared failed (EPOCH_STALLED). Epochs that fail while
  // broken peer links are reported do not count: the partition rules own
  // those.
  int max_failed_epochs = 5;
  // Epochs in a row that end without a step committed (ready or not) while
  // the same members hold every slot, before the job is declared failed
  // (EPOCH_STALLED): the members are alive and form epochs, but no step
  // completes, e.g. a trainer that exited for good while its daemon lives.
  // The diagnosis names the ranks whose trainer did not call its daemon
  // during those epochs.
  int max_epochs_without_commit = 20;
};

// A peer address whose member was removed as cut off from its peers.
struct Quarantine {
  MonoTime until;
  int removals = 0;  // From this address, so far.
  std::string reason;
  // The first join refused during the current quarantine was logged.
  bool refusal_logged = false;
};

struct JoinRequestInfo {
  int rank = -1;  // -1: any empty slot.
  std::string identity;
  std::string peer_address;  // host:port
  std::string incarnation;
  // The process's secret: a repeated Join of a live identity and
  // incarnation is answered with the slot's lease token only when it
  // matches (non-empty).
  std::string join_secret;
  // For a coordinator restart: what the daemon had before.
  int64_t last_epoch = 0;
  bool holds_shard = false;
  int64_t last_committed_step = 0;
  uint64_t model_fingerprint = 0;
  // An in-doubt step it holds prepared (0: none).
  int64_t pending_step = 0;
  // The step fingerprint the member voted on pending_step with.
  uint64_t pending_step_fingerprint = 0;
  // With holds_shard: the shard is what registering the model made, nothing
  // trained since (PlanSlot::registration_state).
  bool registration_state = false;
  CheckpointInventory checkpoints;
};

// A replacement's shard copy, as planned at its join.
struct RecoveryAssignment {
  int target_rank = 0;
  int shard_index = 0;
  // Live members holding the shard, in order of preference (rotated by the
  // target so that several replacements spread over the replicas).
  std::vector<int> source_ranks;
  int64_t step = 0;
};

// The coordinator's probe of a live slot's holder before a join that would
// replace it.
struct HolderProbe {
  std::string address;  // The holder's peer address that was probed.
  ProbeResult result = ProbeResult::kNotProbed;
};

struct JoinOutcome {
  int rank = 0;
  int64_t epoch = 0;
  std::string lease_token;
  // Set when the member must copy its shard before reporting READY.
  std::optional<RecoveryAssignment> recovery;
  // True when the shard has no live replica: only a checkpoint can help.
  bool unrecoverable = false;
  int64_t committed_step = 0;
};

struct ReportOutcome {
  int64_t epoch = 0;
  std::vector<int> removed;
  std::string decision;
};

// The coordinator's membership state and every decision that changes it.
//
// Deterministic and free of I/O: time comes in as an argument and lease
// tokens are chosen by the caller, so every rule is unit-tested with an
// injected clock. The epoch advances whenever the set of members changes and
// whenever a failure report declares the epoch's communicators dead (they
// are never mended in place). The cluster is ready when all W slots are held
// by live members that reported READY for the current epoch.
//
// Not thread-safe: the coordinator service serialises calls under its lock.
class MembershipTable {
 public:
  // INVALID_ARGUMENT naming the field for W < 1, F < 1, F not dividing W, or
  // a non-positive lease.
  static absl::StatusOr<MembershipTable> Create(
      const MembershipOptions& options);

  // Claims a slot (see JoinRequestInfo). Errors change nothing:
  // INVALID_ARGUMENT (identity empty, peer_address malformed, rank out of
  // range), ALREADY_EXISTS (slot held by another live identity, or the
  // identity live in another slot), RESOURCE_EXHAUSTED (no free slot),
  // FAILED_PRECONDITION (a shard of another model), INVALID_ARGUMENT for a
  // negative pending_step or a checkpoint report that is not bounded (at
  // most 1024 steps, >= 0, strictly ascending; a problem of at most 4 KiB),
  // UNAVAILABLE (the peer
  // address is quarantined: see Heartbeat; the first refusal of each
  // quarantine is logged as JOIN_REJECTED). The same identity and
  // incarnation joining its own live slot again (a retried call) is
  // idempotent when it carries the slot's join_secret; without it
  // PERMISSION_DENIED (the incarnation is public; the lease token is
  // handed back only to the process that holds it).
  //
  // A new incarnation of an identity whose slot is still live replaces the
  // old one (a restarted daemon need not wait for its predecessor's lease),
  // unless `holder` shows the old one answering probes at the slot's
  // address: then two processes claim one identity, and replacing would
  // make them evict each other for good (each rejoins when replaced). The
  // newcomer gets ALREADY_EXISTS, logged as JOIN_REJECTED; nothing else
  // changes. The caller probes the address LiveHolderToReplace names.
  //
  // An accepted join starts a new epoch, except while the job forms: when
  // no epoch has been ready yet, the current epoch's plan waits for members
  // (kWait), the join replaces no live member, the current epoch is above
  // the member's last_epoch and some slot is still unclaimed after it, the
  // member joins the current epoch (no communicator exists to supersede,
  // and W joins would otherwise be W epochs that every watcher hears of).
  // The join that claims the last slot starts the epoch the job forms in.
  absl::StatusOr<JoinOutcome> Join(const JoinRequestInfo& request, MonoTime now,
                                   const std::string& lease_token,
                                   const HolderProbe& holder = {});

  // The peer address of the live incarnation that `request` would replace
  // (its identity, live in the slot it would take, with another
  // incarnation), or empty.
  std::string LiveHolderToReplace(const JoinRequestInfo& request) const;

  // Renews the lease of `rank`. NOT_FOUND unless a live member holds the
  // slot with this token; INVALID_ARGUMENT for a state other than JOINING,
  // RECOVERING or READY. A heartbeat for an older epoch renews the lease but
  // its state is ignored.
  //
  // `unreachable` replaces the member's reachability report (whatever the
  // epoch). The live members' reports about the slots' current holders then
  // go to DecidePartition (a strict majority must remain): members cut off
  // from their peers are removed (MEMBER_REMOVED, a new epoch) and their
  // peer addresses quarantined; an undecidable set of broken links is
  // logged once as PARTITION_UNDECIDED. When the heartbeating member is
  // itself removed, NOT_FOUND says why.
  //
  // `checkpoints`, when given, replaces the member's checkpoint inventory;
  // `trainer`, when given, what is known of its trainer (a negative quiet
  // time is INVALID_ARGUMENT); `registration_state`, whether its shard is
  // what registering the model made (PlanSlot::registration_state).
  // A READY at step 0 from a member whose shard the epoch's plan makes
  // again by registration (EpochPlan::remade_shards) is what the plan
  // means.
  // A READY for the current epoch at another step than the epoch's plan is
  // refused (FAILED_PRECONDITION naming both steps) and starts a new epoch,
  // planned from the step the member reported.
  //
  // After the job failed every call is DATA_LOSS with the reason.
  absl::Status Heartbeat(int rank, absl::string_view lease_token, int64_t epoch,
                         int64_t committed_step, MemberPhase state,
                         MonoTime now,
                         std::vector<UnreachablePeer> unreachable = {},
                         const CheckpointInventory* checkpoints = nullptr,
                         const TrainerReport* trainer = nullptr,
                         bool registration_state = false);

  // The member leaves; NOT_FOUND when the token does not match a live
  // member of the slot.
  absl::Status Leave(int rank, absl::string_view lease_token,
                     absl::string_view reason, MonoTime now);

  // Removes the members whose lease ran out by `now`; returns their ranks.
  // While the coordinator is behind (DecideLeaseExpiry) nobody is removed,
  // for up to max_expiry_deferral; each such spell is logged as
  // LEASE_EXPIRY_DEFERRED when it first holds a lease back and when it ends.
  std::vector<int> ExpireLeases(MonoTime now);
  // The lease timer has not run for more than two of its periods: the
  // coordinator stalled, and ExpireLeases must run before anything renews a
  // lease, or the stall goes unseen.
  bool LeaseCheckOverdue(MonoTime now) const {
    return options_.detector.check_period > absl::ZeroDuration() &&
           last_expiry_check_ != MonoTime::InfinitePast() &&
           now - last_expiry_check_ > 2 * options_.detector.check_period;
  }
  // Spells in which expired leases were held back (see ExpireLeases).
  int64_t expiry_deferrals() const { return expiry_deferrals_; }
  // Stalls of the coordinator that renewed leases (kCoordinatorStalled).
  int64_t stalls() const { return stalls_; }

  // A survivor's fast-path report (see DecideReport). INVALID_ARGUMENT for a
  // suspect out of range or equal to the reporter; NOT_FOUND when the
  // reporter is not live with this token; ABORTED for an epoch older than
  // the current one (already handled); FAILED_PRECONDITION for a future
  // epoch. Always starts a new epoch otherwise.
  absl::StatusOr<ReportOutcome> ReportFailure(int reporter,
                                              absl::string_view lease_token,
                                              int64_t epoch, int suspect,
                                              absl::string_view detail,
                                              ProbeResult probe, MonoTime now);

  // True when `rank` is held by a live member with this lease token.
  bool IsLiveMember(int rank, absl::string_view lease_token) const;
  // The rank of the live member holding `lease_token`; nullopt when none
  // does (or the token is empty).
  std::optional<int> LiveRankOf(absl::string_view lease_token) const;

  // The commit vote decided step `step` (invariant 1): the cluster's
  // committed step becomes at least `step`.
  void CommitStep(int64_t step);
  // The commit vote rejected step `step`; logged with the dissenting ranks.
  void NoteCommitRejected(int64_t step, std::vector<int> ranks,
                          const std::string& reason, MonoTime now);

  int64_t epoch() const { return epoch_; }
  bool ready() const;
  // The current epoch's plan (PlanKind::kWait until every slot is claimed)
  // and the epoch it was decided for.
  const EpochPlan& plan() const { return plan_; }
  // The job cannot continue (a shard lost without a usable checkpoint, or
  // the same members failed max_failed_epochs epochs in a row): terminal.
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  // Re-decides the plan at `now` (a wait for a lost shard's holders may have
  // run out). ExpireLeases calls it too.
  void Settle(MonoTime now);
  int64_t committed_step() const { return committed_step_; }
  // Epochs that became ready after a rollback plan (ranks restored a
  // checkpoint), whether or not steps after it are redone.
  int64_t checkpoint_fallbacks() const { return checkpoint_fallbacks_; }
  const MembershipOptions& options() const { return options_; }
  const std::vector<SlotRecord>& slots() const { return slots_; }
  // Oldest first; at most options().max_decisions.
  const std::deque<Decision>& decisions() const { return decisions_; }
  // Decisions ever logged (the deque drops the oldest).
  int64_t decisions_total() const { return decisions_total_; }
  // Links between live members that both ends reported down at the last
  // partition decision, as (lower rank, higher rank) pairs in order (none
  // when no link is down).
  const std::vector<std::pair<int, int>>& broken_links() const {
    return broken_links_;
  }
  int broken_peer_links() const {
    return static_cast<int>(broken_links_.size());
  }
  // Peer addresses removed as cut off, current and past quarantines.
  const std::map<std::string, Quarantine>& quarantines() const {
    return quarantines_;
  }

  // Records that the job was not ready join_timeout after start, naming
  // the empty or unready slots. Returns the reason.
  std::string NoteJoinTimeout(MonoTime now, absl::Duration waited);
  // The earliest lease expiry among live members, or the end of a wait for
  // a lost shard's holders (InfiniteFuture if none): when ExpireLeases
  // next has work.
  MonoTime next_expiry() const;

 private:
  explicit MembershipTable(const MembershipOptions& options);

  void Log(MonoTime now, DecisionKind kind, std::vector<int> ranks,
           std::string reason);
  void StartEpoch(MonoTime now, int64_t at_least, absl::string_view why);
  void Remove(int rank, MemberPhase phase, MonoTime now,
              const std::string& reason);
  void NoteReadiness(MonoTime now);
  // The current plan makes `rank`'s shard again by registration
  // (EpochPlan::remade_shards).
  bool PlanRemakes(int rank) const;
  // Whether `slot` counts towards ready(): READY for the current epoch.
  bool CountsReady(const SlotRecord& slot) const {
    return slot.phase == MemberPhase::kReady && slot.ready_epoch == epoch_;
  }
  // Recomputes ready_slots_ (O(W): after joins, removals, new epochs).
  void RecountReady();
  // Whether a join that leaves `slot` claimed may stay in the current
  // epoch (see Join): the job forms and the plan still waits for members.
  bool CoalescesJoin(const JoinRequestInfo& request, bool replaced_live) const;
  // Applies DecidePartition to the live members' reachability reports.
  void DecidePartitions(MonoTime now);
  std::vector<MemberLiveness> Liveness() const;
  // Decides plan_ for the current membership; logs RECOVERY_PLANNED once
  // per epoch for a plan with copies or restores, and fails the job on a
  // kFailed plan.
  void Replan(MonoTime now);
  // Enters the terminal state (once) with `reason`, logged as JOB_FAILED.
  void Fail(MonoTime now, std::vector<int> ranks, const std::string& why);
  // The incarnations of every slot's live holder ("" for an empty slot).
  std::string MembershipKey() const;
  // EPOCH_STALLED's diagnosis of `stall`: the epochs and their causes, and
  // for a spell without a commit which members' trainers did not call
  // their daemon during it (when the members reported their trainers).
  std::string StallDiagnosis(const Stall& stall, MonoTime now) const;
  // The live members' ranks and trainer sightings.
  std::vector<RankSighting> LiveSightings() const;

  MembershipOptions options_;
  int64_t epoch_ = 0;
  // When the current epoch began.
  MonoTime epoch_began_ = MonoTime::InfinitePast();
  int64_t committed_step_ = 0;
  int64_t checkpoint_fallbacks_ = 0;
  bool was_ready_ = false;
  // Some epoch was ready in this table's life (the job has formed).
  bool ever_ready_ = false;
  // Slots for which CountsReady holds: ready() is O(1) on the heartbeat
  // path.
  int ready_slots_ = 0;
  std::vector<SlotRecord> slots_;
  std::deque<Decision> decisions_;
  int64_t decisions_total_ = 0;
  std::vector<Accusation> accusations_;
  // Since when the coordinator has been behind (see ExpireLeases), whether
  // this spell has held a lease back, when ExpireLeases last ran, and the
  // spells that held one.
  std::optional<MonoTime> behind_since_;
  bool behind_deferred_ = false;
  MonoTime last_expiry_check_ = MonoTime::InfinitePast();
  int64_t expiry_deferrals_ = 0;
  int64_t stalls_ = 0;
  std::map<std::string, Quarantine> quarantines_;
  std::vector<std::pair<int, int>> broken_links_;
  // Broken links without a verdict ("" when none), since when they have
  // been the same, and those last logged as PARTITION_UNDECIDED.
  std::string undecided_links_;
  MonoTime undecided_since_;
  std::string undecided_logged_;
  EpochPlan plan_;
  // Replan's input, kept so that its W slots are not allocated per call.
  PlanInput plan_input_;
  int64_t plan_epoch_ = -1;
  // The membership the current epoch's plan was issued to ("" when none).
  std::string plan_key_;
  // Epochs in a row without progress with the same membership.
  ProgressWatch progress_;
  // A lost shard is not declared lost before this (see rejoin_grace).
  MonoTime settle_after_ = MonoTime::InfinitePast();
  std::string failure_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_MEMBERSHIP_TABLE_H_
