#include "daemon/coordinator/coordinator_manager.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/coordinator/common_checkpoint.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/rendezvous_key.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::coordinator {
namespace {

// One line per decision on stderr: the log operators read next to the
// cluster state.
// `wall` is when it was decided on the wall clock.
void LogDecision(const Decision& d, absl::Time wall) {
  std::fprintf(
      stderr, "%s coordinator: epoch %lld %s: %s\n",
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", wall, absl::UTCTimeZone())
          .c_str(),
      static_cast<long long>(d.epoch),
      std::string(DecisionKindName(d.kind)).c_str(), d.reason.c_str());
}

// The cause label of a removal decided on a failure report. The service
// passes the report's kind as the detail's prefix ("FAILURE_KIND_X: ..."):
// "x", which the observer keeps if it is a known cause.
std::string ReportCause(absl::string_view detail) {
  if (!absl::ConsumePrefix(&detail, "FAILURE_KIND_")) return "other";
  return absl::AsciiStrToLower(detail.substr(0, detail.find(':')));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorManager>> CoordinatorManager::Create(
    const CoordinatorOptions& options, std::unique_ptr<Clock> clock,
    Prober prober) {
  if (clock == nullptr) return absl::InvalidArgumentError("clock is null");
  if (options.join_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("join_timeout must be positive");
  }
  MembershipOptions membership = options.membership;
  // A shard without a live holder is not called lost before its holders
  // had time to re-join this (perhaps restarted) coordinator.
  if (membership.started == MonoTime::InfinitePast()) {
    membership.started = clock->MonotonicNow();
  }
  absl::StatusOr<MembershipTable> table = MembershipTable::Create(membership);
  if (!table.ok()) return table.status();
  return std::unique_ptr<CoordinatorManager>(new CoordinatorManager(
      options, *std::move(table), std::move(clock), std::move(prober)));
}

CoordinatorManager::CoordinatorManager(const CoordinatorOptions& options,
                                       MembershipTable table,
                                       std::unique_ptr<Clock> clock,
                                       Prober prober)
    : options_(options),
      clock_(std::move(clock)),
      prober_(std::move(prober)),
      started_(clock_->MonotonicNow()),
      started_wall_(clock_->WallNow()),
      table_(std::move(table)),
      votes_(options.membership.world_size) {
  if (options_.decision_log != nullptr) {
    recorded_ = options_.decision_log->last();
  }
  std::random_device seed;
  token_salt_ = (static_cast<uint64_t>(seed()) << 32) ^ seed();
  if (options_.observer != nullptr) {
    options_.observer->Lease(options_.membership.detector.lease);
  }
  absl::MutexLock lock(&mu_);
  scoped_holder_.assign(options_.membership.world_size, std::string());
  holder_changed_at_.assign(options_.membership.world_size, 0);
  scoped_header_ = CurrentScopedHeader();
  Publish();
}

std::string CoordinatorManager::NewLeaseToken() {
  // Unique per join within this coordinator's life, unguessable across
  // restarts: a member of a previous coordinator cannot reuse its token.
  ++token_counter_;
  return absl::StrFormat("%016x-%d", token_salt_, token_counter_);
}

void CoordinatorManager::Changed(
    int64_t epoch_before, size_t decisions_before,
    absl::string_view removal_cause,
    const std::vector<MonoTime>* heartbeats_before) {
  const int64_t fresh = table_.decisions_total() - decisions_before;
  const auto& log = table_.decisions();
  for (int64_t i =
           std::max<int64_t>(0, static_cast<int64_t>(log.size()) - fresh);
       i < static_cast<int64_t>(log.size()); ++i) {
    LogDecision(log[i],
                clock_->WallNow() - (clock_->MonotonicNow() - log[i].time));
    if (log[i].kind == DecisionKind::kMemberRemoved &&
        options_.observer != nullptr) {
      options_.observer->MemberFailed(removal_cause);
    }
    TrackRecovery(log[i], heartbeats_before);
  }
  if (table_.epoch() != epoch_before) {
    rendezvous_.AdvanceEpoch(table_.epoch());
    // Ballots of the old epoch can never complete; their waiters see the
    // epoch change and return ABORTED.
    votes_.DropBefore(table_.epoch());
  }
  if (fresh > 0 || table_.epoch() != epoch_before) {
    ++version_;
    // A holder changes only with a decision naming its rank (joined,
    // removed, left); when the log dropped some of them, look at all.
    std::vector<int> ranks;
    const bool all = fresh > static_cast<int64_t>(log.size());
    for (int64_t i =
             std::max<int64_t>(0, static_cast<int64_t>(log.size()) - fresh);
         !all && i < static_cast<int64_t>(log.size()); ++i) {
      ranks.insert(ranks.end(), log[i].ranks.begin(), log[i].ranks.end());
    }
    NoteVersion(ranks, all);
  }
  Publish();
}

CoordinatorManager::ScopedHeader CoordinatorManager::CurrentScopedHeader()
    const {
  ScopedHeader h;
  h.epoch = table_.epoch();
  h.ready = table_.ready();
  h.failed = table_.failed();
  h.plan_epoch = table_.epoch();
  h.plan_kind = static_cast<int>(table_.plan().kind);
  h.plan_step = table_.plan().step;
  h.plan_items = table_.plan().copies.size() + table_.plan().restores.size();
  return h;
}

void CoordinatorManager::NoteVersion(const std::vector<int>& ranks,
                                     bool all_ranks) {
  bool moved = false;
  const ScopedHeader header = CurrentScopedHeader();
  if (!(header == scoped_header_)) {
    scoped_header_ = header;
    moved = true;
    ++scoped_wake_;
  }
  const auto& slots = table_.slots();
  auto look = [&](int r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (r < 0 || r >= static_cast<int>(slots.size())) return;
    const std::string& holder =
        slots[r].live() ? slots[r].incarnation : std::string();
    if (holder == scoped_holder_[r]) return;
    scoped_holder_[r] = holder;
    holder_changed_at_[r] = scoped_version_ + 1;
    moved = true;
  };
  if (all_ranks) {
    for (int r = 0; r < static_cast<int>(slots.size()); ++r) look(r);
  } else {
    for (int r : ranks) look(r);
  }
  if (moved) ++scoped_version_;
  signal_.Publish(version_, scoped_wake_);
}

void CoordinatorManager::TrackRecovery(
    const Decision& d, const std::vector<MonoTime>* heartbeats_before) {
  metrics::CoordinatorObserver* const observer = options_.observer;
  switch (d.kind) {
    case DecisionKind::kMemberRemoved:
      if (!recovery_.active && !d.ranks.empty()) {
        recovery_ = RecoveryTimes{};
        recovery_.active = true;
        recovery_.removed = d.time;
        // The last sign of life: detection is measured from there. A member
        // replaced by its new incarnation has lost its slot to the newcomer
        // by now: its heartbeat is in heartbeats_before.
        const int rank = d.ranks[0];
        const MonoTime last =
            heartbeats_before != nullptr &&
                    rank < static_cast<int>(heartbeats_before->size())
                ? (*heartbeats_before)[rank]
                : table_.slots()[rank].last_heartbeat;
        recovery_.last_alive =
            last == MonoTime::InfinitePast() ? d.time : std::min(last, d.time);
      }
      break;
    case DecisionKind::kRecoveryPlanned:
    case DecisionKind::kUnrecoverable:
      if (recovery_.active && !d.ranks.empty()) {
        // A later replacement (the first one died too) starts the
        // rendezvous again; the wait for a replacement ended at the first.
        recovery_.replacement = d.ranks[0];
        recovery_.rendezvous_done = false;
        if (!recovery_.planned) {
          recovery_.planned = true;
          recovery_.joined = d.time;
          if (observer != nullptr) observer->RecoveryStarted();
        }
      }
      break;
    case DecisionKind::kEpochReady:
      if (recovery_.active) {
        if (recovery_.planned && observer != nullptr) {
          namespace labels = metrics::coordinator_labels;
          // The last member to report READY may be a survivor: then the
          // rendezvous ends with the epoch and the transfer took no time of
          // its own.
          const MonoTime rendezvous =
              recovery_.rendezvous_done ? recovery_.rendezvous : d.time;
          observer->RecoveryPhase(labels::kDetection,
                                  recovery_.removed - recovery_.last_alive);
          observer->RecoveryPhase(labels::kAwaitingReplacement,
                                  recovery_.joined - recovery_.removed);
          // The replacement builds its communicators with everyone, then
          // copies its shard (a checkpoint fallback restores before the
          // communicators, so there the restore counts as rendezvous).
          observer->RecoveryPhase(labels::kRendezvous,
                                  rendezvous - recovery_.joined);
          observer->RecoveryPhase(labels::kTransfer, d.time - rendezvous);
          observer->RecoveryPhase(labels::kTotal,
                                  d.time - recovery_.last_alive);
          observer->RecoveryCompleted();
        }
        // A hung member that came back holding its shard needs no copy:
        // the failure ends without a recovery.
        recovery_ = RecoveryTimes{};
      }
      break;
    default:
      break;
  }
}

void CoordinatorManager::NoteRendezvous(MonoTime now) {
  if (!recovery_.planned || recovery_.rendezvous_done) return;
  for (const SlotRecord& s : table_.slots()) {
    if (s.rank == recovery_.replacement || !s.live()) continue;
    if (s.phase != MemberPhase::kReady || s.ready_epoch != table_.epoch()) {
      return;
    }
  }
  recovery_.rendezvous_done = true;
  recovery_.rendezvous = now;
}

void CoordinatorManager::Publish() {
  metrics::CoordinatorObserver* const observer = options_.observer;
  if (observer == nullptr) {
    if (table_.decisions_total() != published_decisions_) {
      published_decisions_ = table_.decisions_total();
      int live = 0;
      for (const SlotRecord& s : table_.slots()) live += s.live() ? 1 : 0;
      live_members_ = live;
    }
    return;
  }
  if (table_.checkpoint_fallbacks() > published_fallbacks_) {
    for (int64_t i = published_fallbacks_; i < table_.checkpoint_fallbacks();
         ++i) {
      observer->CheckpointFallback();
    }
    published_fallbacks_ = table_.checkpoint_fallbacks();
  }
  for (; published_deferrals_ < table_.expiry_deferrals();
       ++published_deferrals_) {
    observer->LeaseExpiryDeferred();
  }
  for (; published_stalls_ < table_.stalls(); ++published_stalls_) {
    observer->CoordinatorStalled();
  }
  // Shard indices that no live member holds: only a checkpoint can bring
  // them back.
  // Live members change only with a decision (join, removal, leave): the
  // O(W) counts are redone only then, not at every heartbeat.
  const bool recount = table_.decisions_total() != published_decisions_;
  if (recount) {
    published_decisions_ = table_.decisions_total();
    const int f = table_.options().sharding_factor;
    std::vector<int> holders(f, 0);
    int live = 0;
    for (const SlotRecord& slot : table_.slots()) {
      if (slot.live()) {
        ++holders[slot.rank % f];
        ++live;
      }
    }
    live_members_ = live;
    int without = 0;
    for (int h : holders) without += h == 0 ? 1 : 0;
    if (without != published_without_replica_) {
      published_without_replica_ = without;
      observer->ShardsWithoutReplica(without);
    }
  }
  if (table_.failed() && !published_failed_) {
    published_failed_ = true;
    observer->JobFailed(true, table_.failure());
  }
  if (table_.broken_peer_links() != published_broken_links_) {
    published_broken_links_ = table_.broken_peer_links();
    observer->BrokenPeerLinks(published_broken_links_);
  }
  const int ready = table_.ready() ? 1 : 0;
  if (table_.epoch() != published_epoch_ || ready != published_ready_) {
    published_epoch_ = table_.epoch();
    published_ready_ = ready;
    observer->EpochChanged(published_epoch_, ready == 1);
  }
  if (live_members_ != published_live_) {
    published_live_ = live_members_;
    observer->Members(live_members_, table_.options().world_size);
  }
  if (table_.committed_step() != published_step_) {
    published_step_ = table_.committed_step();
    observer->CommittedStep(published_step_);
  }
}

absl::StatusOr<JoinOutcome> CoordinatorManager::Join(
    const JoinRequestInfo& request) {
  // A join that would replace a live incarnation of the same identity: is
  // the old one still there? The probe is I/O, done without the lock (a
  // dead process's port refuses at once; a hung one times out).
  HolderProbe holder;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) {
      return absl::UnavailableError("the coordinator is shutting down");
    }
    holder.address = table_.LiveHolderToReplace(request);
  }
  if (prober_ && !holder.address.empty()) {
    holder.result = prober_(holder.address);
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_)
    return absl::UnavailableError("the coordinator is shutting down");
  const int64_t epoch = table_.epoch();
  const int64_t logged = table_.decisions_total();
  std::vector<MonoTime> heartbeats;
  heartbeats.reserve(table_.slots().size());
  for (const SlotRecord& s : table_.slots()) {
    heartbeats.push_back(s.last_heartbeat);
  }
  SettleRecordedCommit(request);
  absl::StatusOr<JoinOutcome> out =
      table_.Join(request, clock_->MonotonicNow(), NewLeaseToken(), holder);
  // A removal here is a live member replaced by a new incarnation of the
  // same identity: its previous process is gone.
  Changed(epoch, logged, metrics::coordinator_labels::kProcessExited,
          &heartbeats);
  return out;
}

absl::Status CoordinatorManager::Heartbeat(
    int rank, const std::string& lease_token, int64_t epoch,
    int64_t committed_step, MemberPhase state,
    std::vector<UnreachablePeer> unreachable,
    const CheckpointInventory* checkpoints, LeaseView* lease_out,
    const TrainerReport* trainer, bool registration_state) {
  absl::MutexLock lock(&mu_);
  if (shutdown_)
    return absl::UnavailableError("the coordinator is shutting down");
  // After a stall the first thing to run checks the leases, not only the
  // timer: a heartbeat served first would renew its own lease, and the
  // stall (its decision, its count) would depend on which thread ran first.
  if (table_.LeaseCheckOverdue(clock_->MonotonicNow())) {
    const int64_t before_check = table_.epoch();
    const int64_t logged_check = table_.decisions_total();
    table_.ExpireLeases(clock_->MonotonicNow());
    Changed(before_check, logged_check,
            metrics::coordinator_labels::kLeaseExpired);
  }
  const int64_t before = table_.epoch();
  const int64_t logged = table_.decisions_total();
  const bool was_ready = table_.ready();
  const bool known =
      rank >= 0 && rank < static_cast<int>(table_.slots().size());
  const MemberPhase phase_before =
      known ? table_.slots()[rank].phase : MemberPhase::kEmpty;
  const MonoTime now = clock_->MonotonicNow();
  absl::Status s = table_.Heartbeat(rank, lease_token, epoch, committed_step,
                                    state, now, std::move(unreachable),
                                    checkpoints, trainer, registration_state);
  NoteRendezvous(now);  // Before Changed reports a recovery's ready epoch.
  // The only removals a heartbeat makes are of members cut off from their
  // peers.
  Changed(before, logged, metrics::coordinator_labels::kPeerUnreachable);
  // A member's state change (JOINING -> READY, say) is a membership change
  // for watchers too, not only a new epoch or readiness.
  if (table_.ready() != was_ready ||
      (known && table_.slots()[rank].phase != phase_before)) {
    ++version_;
    NoteVersion({}, false);  // No holder changed without a decision.
  }
  if (s.ok() && lease_out != nullptr) {
    const SlotRecord& slot = table_.slots()[rank];
    lease_out->lease_expiry = slot.lease_expiry;
    lease_out->lease_expiry_wall =
        clock_->WallNow() - (clock_->MonotonicNow() - slot.lease_expiry);
    lease_out->lease = table_.options().detector.lease;
    lease_out->epoch = table_.epoch();
    lease_out->ready = table_.ready();
    lease_out->common_checkpoint_step = NewestCommonCheckpoint(table_.slots());
  }
  return s;
}

absl::Status CoordinatorManager::Leave(int rank, const std::string& lease_token,
                                       const std::string& reason) {
  absl::MutexLock lock(&mu_);
  const int64_t before = table_.epoch();
  const int64_t logged = table_.decisions_total();
  absl::Status s =
      table_.Leave(rank, lease_token, reason, clock_->MonotonicNow());
  Changed(before, logged);
  return s;
}

absl::StatusOr<ReportOutcome> CoordinatorManager::ReportFailure(
    int reporter, const std::string& lease_token, int64_t epoch, int suspect,
    const std::string& detail) {
  std::string suspect_address;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) {
      return absl::UnavailableError("the coordinator is shutting down");
    }
    if (suspect >= 0 && suspect < static_cast<int>(table_.slots().size()) &&
        table_.slots()[suspect].live()) {
      suspect_address = table_.slots()[suspect].peer_address;
    }
  }
  // The probe is I/O: done without the lock, its result fed to the pure
  // decision.
  const ProbeResult probe = (prober_ && !suspect_address.empty())
                                ? prober_(suspect_address)
                                : ProbeResult::kNotProbed;
  absl::MutexLock lock(&mu_);
  const int64_t before = table_.epoch();
  const int64_t logged = table_.decisions_total();
  absl::StatusOr<ReportOutcome> out =
      table_.ReportFailure(reporter, lease_token, epoch, suspect, detail, probe,
                           clock_->MonotonicNow());
  Changed(before, logged, ReportCause(detail));
  if (options_.observer != nullptr) {
    namespace labels = metrics::coordinator_labels;
    if (out.ok()) {
      options_.observer->FailureReport(out->removed.empty() ? labels::kDismissed
                                                            : labels::kRemoved);
    } else if (absl::IsAborted(out.status())) {
      options_.observer->FailureReport(labels::kStale);
    }
  }
  return out;
}

absl::Status CoordinatorManager::AuthorizeRendezvousLocked(
    RendezvousAccess access, const std::string& lease_token,
    absl::Span<const std::string> keys) const {
  const RendezvousCaller caller{!lease_token.empty(),
                                table_.LiveRankOf(lease_token)};
  return AuthorizeRendezvous(access, caller, keys,
                             options_.membership.world_size);
}

absl::Status CoordinatorManager::RendezvousSet(const std::string& lease_token,
                                               int64_t epoch,
                                               const std::string& key,
                                               absl::string_view value,
                                               bool if_absent) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AuthorizeRendezvousLocked(
          RendezvousAccess::kSet, lease_token, absl::MakeConstSpan(&key, 1));
      !s.ok()) {
    return s;
  }
  // Authorised: the key parses, and its owner (the caller) may replace a
  // model key's value; every other key is write-once.
  const absl::StatusOr<core::RendezvousKey> parsed =
      core::ParseRendezvousKey(key);
  return rendezvous_.Set(epoch, key, value, if_absent,
                         parsed.ok() && parsed->replaceable);
}

absl::StatusOr<std::string> CoordinatorManager::RendezvousGet(
    const std::string& lease_token, int64_t epoch, const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AuthorizeRendezvousLocked(
          RendezvousAccess::kGet, lease_token, absl::MakeConstSpan(&key, 1));
      !s.ok()) {
    return s;
  }
  return rendezvous_.Get(epoch, key);
}

absl::StatusOr<std::vector<std::string>> CoordinatorManager::RendezvousWait(
    const std::string& lease_token, int64_t epoch,
    const std::vector<std::string>& keys, MonoTime deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = AuthorizeRendezvousLocked(RendezvousAccess::kWait,
                                                   lease_token, keys);
        !s.ok()) {
      return s;
    }
  }
  return rendezvous_.Wait(epoch, keys, deadline);
}

absl::StatusOr<CommitDecision> CoordinatorManager::ShouldCommit(
    int64_t epoch, int64_t step, const CommitVote& vote,
    const std::string& lease_token, MonoTime deadline) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) {
    return absl::UnavailableError("the coordinator is shutting down");
  }
  if (table_.failed()) {
    return absl::DataLossError(
        absl::StrCat("the job has failed: ", table_.failure()));
  }
  if (!table_.IsLiveMember(vote.rank, lease_token)) {
    return absl::NotFoundError(absl::StrCat(
        "rank ", vote.rank, " is not a live member with this lease_token"));
  }
  if (epoch != table_.epoch()) {
    return absl::AbortedError(
        absl::StrCat("epoch ", epoch, " is not the current epoch ",
                     table_.epoch(), ": the step cannot commit"));
  }
  if (std::optional<CommitDecision> d = votes_.Decision(epoch, step)) {
    return *d;
  }
  if (!table_.ready()) {
    return absl::AbortedError(
        absl::StrCat("epoch ", epoch, " is not ready: the step cannot commit"));
  }
  if (absl::Status s = votes_.Vote(epoch, step, table_.committed_step(), vote);
      !s.ok()) {
    return s;
  }
  if (std::optional<CommitDecision> d = votes_.Decision(epoch, step)) {
    // This vote completed the ballot: apply the decision once.
    const int64_t logged = table_.decisions_total();
    if (options_.observer != nullptr) {
      options_.observer->CommitVote(d->commit ? "commit" : "reject");
    }
    if (d->commit) {
      table_.CommitStep(step);
      RecordCommit(epoch, step, vote.fingerprint);
      // Decided and recorded, no voter answered yet: a coordinator that dies
      // here leaves every member in doubt.
      SHARDD_FAILPOINT("commit.decided");
    } else {
      table_.NoteCommitRejected(step, d->dissenting, d->reason,
                                clock_->MonotonicNow());
    }
    Changed(epoch, logged);
    ++version_;
    NoteVersion({}, false);
    return *d;
  }
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || table_.epoch() != epoch || table_.failed() ||
           votes_.Decision(epoch, step).has_value();
  };
  AwaitUntil(&mu_, absl::Condition(&settled), deadline);
  if (std::optional<CommitDecision> d = votes_.Decision(epoch, step)) {
    return *d;
  }
  if (shutdown_) {
    return absl::UnavailableError("the coordinator is shutting down");
  }
  if (table_.failed()) {
    return absl::DataLossError(
        absl::StrCat("the job has failed: ", table_.failure()));
  }
  if (table_.epoch() != epoch) {
    if (options_.observer != nullptr) options_.observer->CommitVote("aborted");
    return absl::AbortedError(absl::StrCat(
        "epoch changed from ", epoch, " to ", table_.epoch(),
        " before every member voted on step ", step, ": not committed"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "commit vote on step ", step, ": ", votes_.votes(epoch, step), " of ",
      table_.options().world_size,
      " members voted before the deadline; do not apply the step"));
}

MonoTime CoordinatorManager::Tick() {
  absl::MutexLock lock(&mu_);
  const MonoTime now = clock_->MonotonicNow();
  const int64_t before = table_.epoch();
  const int64_t logged = table_.decisions_total();
  table_.ExpireLeases(now);  // Removals are reported in Changed.
  if (!join_timeout_reported_ && !table_.ready() &&
      now - started_ >= options_.join_timeout) {
    join_timeout_reported_ = true;
    table_.NoteJoinTimeout(now, now - started_);
  }
  if (table_.ready()) join_timeout_reported_ = true;
  Changed(before, logged, metrics::coordinator_labels::kLeaseExpired);
  MonoTime next = table_.next_expiry();
  if (!join_timeout_reported_) {
    next = std::min(next, started_ + options_.join_timeout);
  }
  return next;
}

void CoordinatorManager::FillHeader(ClusterSnapshot& s) const {
  s.version = version_;
  s.epoch = table_.epoch();
  s.ready = table_.ready();
  s.committed_step = table_.committed_step();
  s.world_size = table_.options().world_size;
  s.sharding_factor = table_.options().sharding_factor;
  s.lease = table_.options().detector.lease;
  s.started = started_wall_;
  s.mono_now = clock_->MonotonicNow();
  s.wall_now = clock_->WallNow();
  s.plan = table_.plan();
  s.failed = table_.failed();
  s.failure = table_.failure();
  s.live_members = live_members_;
  const auto& log = table_.decisions();
  if (!log.empty()) s.last_reason = log.back().reason;
}

ClusterSnapshot CoordinatorManager::Snapshot(int max_decisions) const {
  absl::MutexLock lock(&mu_);
  ClusterSnapshot s;
  FillHeader(s);
  s.slots = table_.slots();
  s.quarantines = table_.quarantines();
  s.broken_links = table_.broken_links();
  const auto& log = table_.decisions();
  for (auto it = log.rbegin();
       it != log.rend() && static_cast<int>(s.decisions.size()) < max_decisions;
       ++it) {
    s.decisions.push_back(*it);
  }
  if (!log.empty()) s.last_reason = log.back().reason;
  return s;
}

void CoordinatorManager::RecordCommit(int64_t epoch, int64_t step,
                                      uint64_t fingerprint) {
  recorded_.reset();  // This coordinator decides from now on.
  if (options_.decision_log == nullptr) return;
  if (absl::Status s = options_.decision_log->Record(
          {.step = step, .epoch = epoch, .fingerprint = fingerprint});
      !s.ok()) {
    // The decision stands; it is only not durable.
    std::fprintf(stderr,
                 "coordinator: the decision to commit step %lld is not "
                 "recorded: %s\n",
                 static_cast<long long>(step), s.ToString().c_str());
  }
}

void CoordinatorManager::SettleRecordedCommit(const JoinRequestInfo& request) {
  if (!recorded_.has_value() || !request.holds_shard ||
      !RecordedCommitSettles(*recorded_, request.last_committed_step,
                             request.pending_step,
                             request.pending_step_fingerprint)) {
    return;
  }
  std::fprintf(stderr,
               "coordinator: step %lld was committed by the previous "
               "coordinator in epoch %lld (--decision_log): rank %d and every "
               "member in doubt about it apply it\n",
               static_cast<long long>(recorded_->step),
               static_cast<long long>(recorded_->epoch), request.rank);
  table_.CommitStep(recorded_->step);
  recorded_.reset();
}

LeaseView CoordinatorManager::Lease(int rank) const {
  absl::MutexLock lock(&mu_);
  LeaseView v;
  v.lease_expiry = table_.slots()[rank].lease_expiry;
  v.lease_expiry_wall =
      clock_->WallNow() - (clock_->MonotonicNow() - v.lease_expiry);
  v.lease = table_.options().detector.lease;
  v.epoch = table_.epoch();
  v.ready = table_.ready();
  v.common_checkpoint_step = NewestCommonCheckpoint(table_.slots());
  return v;
}

std::shared_ptr<const ClusterSnapshot> CoordinatorManager::SharedSnapshot()
    const {
  absl::MutexLock lock(&mu_);
  if (shared_snapshot_ == nullptr || shared_snapshot_->version != version_) {
    auto s = std::make_shared<ClusterSnapshot>();
    FillHeader(*s);
    s->slots = table_.slots();
    shared_snapshot_ = std::move(s);
  }
  return shared_snapshot_;
}

std::shared_ptr<const MembershipChanges> CoordinatorManager::ChangesSince(
    int64_t since) const {
  absl::MutexLock lock(&mu_);
  if (changes_cache_version_ != scoped_version_) {
    changes_cache_.clear();
    changes_cache_version_ = scoped_version_;
  }
  const int64_t key = since < 0 ? -1 : since;
  if (auto it = changes_cache_.find(key); it != changes_cache_.end()) {
    return it->second;
  }
  auto c = std::make_shared<MembershipChanges>();
  c->version = scoped_version_;
  c->full = key < 0;
  FillHeader(c->snapshot);
  const auto& slots = table_.slots();
  if (c->full) {
    c->snapshot.slots = slots;
  } else {
    for (size_t r = 0; r < slots.size(); ++r) {
      if (holder_changed_at_[r] > since) c->snapshot.slots.push_back(slots[r]);
    }
  }
  changes_cache_[key] = c;
  return c;
}

std::shared_ptr<const MembershipChanges> CoordinatorManager::ScopedSnapshot(
    int rank) const {
  const int w = options_.membership.world_size;
  const int f = options_.membership.sharding_factor;
  if (rank < 0 || rank >= w) return ChangesSince(-1);
  auto c = std::make_shared<MembershipChanges>();
  c->full = true;
  absl::MutexLock lock(&mu_);
  c->version = scoped_version_;
  FillHeader(c->snapshot);
  const auto& slots = table_.slots();
  // The shard group [g*F, (g+1)*F), then the rest of the replica group
  // (rank mod F), in rank order.
  const int group = rank / f;
  c->snapshot.slots.reserve(f + w / f - 1);
  for (int r = rank % f; r < w; r += f) {
    if (r / f == group) {
      for (int s = group * f; s < (group + 1) * f; ++s) {
        c->snapshot.slots.push_back(slots[s]);
      }
    } else {
      c->snapshot.slots.push_back(slots[r]);
    }
  }
  return c;
}

ClusterSnapshot CoordinatorManager::JoinView(int rank, bool all_slots) const {
  absl::MutexLock lock(&mu_);
  ClusterSnapshot s;
  FillHeader(s);
  if (all_slots) {
    s.slots = table_.slots();
  } else if (rank >= 0 && rank < static_cast<int>(table_.slots().size())) {
    s.slots.push_back(table_.slots()[rank]);
  }
  return s;
}

ChangeSignal::Versions CoordinatorManager::AwaitVersion(
    bool scoped, int64_t seen, MonoTime deadline) const {
  return signal_.Await(scoped, seen, deadline);
}

ClusterSnapshot CoordinatorManager::AwaitChange(int64_t seen_version,
                                                MonoTime deadline) const {
  signal_.Await(/*scoped=*/false, seen_version, deadline);
  return Snapshot();
}

void CoordinatorManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  signal_.Shutdown();
  rendezvous_.Shutdown();
}

bool CoordinatorManager::shut_down() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

}  // namespace shardd::coordinator
