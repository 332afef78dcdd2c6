#include "daemon/coordinator/membership_table.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/coordinator/partition_verdict.h"
#include "daemon/core/host_port.h"

namespace shardd::coordinator {

absl::string_view MemberPhaseName(MemberPhase phase) {
  switch (phase) {
    case MemberPhase::kEmpty:
      return "EMPTY";
    case MemberPhase::kJoining:
      return "JOINING";
    case MemberPhase::kRecovering:
      return "RECOVERING";
    case MemberPhase::kReady:
      return "READY";
    case MemberPhase::kFailed:
      return "FAILED";
    case MemberPhase::kLeft:
      return "LEFT";
  }
  return "UNKNOWN";
}

absl::string_view DecisionKindName(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kMemberJoined:
      return "MEMBER_JOINED";
    case DecisionKind::kJoinRejected:
      return "JOIN_REJECTED";
    case DecisionKind::kMemberRemoved:
      return "MEMBER_REMOVED";
    case DecisionKind::kMemberLeft:
      return "MEMBER_LEFT";
    case DecisionKind::kEpochStarted:
      return "EPOCH_STARTED";
    case DecisionKind::kEpochReady:
      return "EPOCH_READY";
    case DecisionKind::kRecoveryPlanned:
      return "RECOVERY_PLANNED";
    case DecisionKind::kFailureReportDismissed:
      return "FAILURE_REPORT_DISMISSED";
    case DecisionKind::kCommitRejected:
      return "COMMIT_REJECTED";
    case DecisionKind::kUnrecoverable:
      return "UNRECOVERABLE";
    case DecisionKind::kJoinTimeout:
      return "JOIN_TIMEOUT";
    case DecisionKind::kPartitionUndecided:
      return "PARTITION_UNDECIDED";
    case DecisionKind::kEpochStalled:
      return "EPOCH_STALLED";
    case DecisionKind::kJobFailed:
      return "JOB_FAILED";
    case DecisionKind::kLeaseExpiryDeferred:
      return "LEASE_EXPIRY_DEFERRED";
    case DecisionKind::kCoordinatorStalled:
      return "COORDINATOR_STALLED";
  }
  return "UNKNOWN";
}

namespace {

// A member's checkpoint report, bounded: it is kept per slot and planned
// over at every epoch. INVALID_ARGUMENT naming `field`.
absl::Status ValidateInventory(const CheckpointInventory& inventory,
                               absl::string_view field) {
  constexpr size_t kMaxSteps = 1024;
  constexpr size_t kMaxProblem = 4096;
  if (inventory.steps.size() > kMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".steps: ", inventory.steps.size(),
                     " entries, at most ", kMaxSteps));
  }
  for (size_t i = 0; i < inventory.steps.size(); ++i) {
    if (inventory.steps[i] < 0 ||
        (i > 0 && inventory.steps[i] <= inventory.steps[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".steps[", i, "]: ", inventory.steps[i],
                       " (steps must be >= 0 and strictly ascending)"));
    }
  }
  if (inventory.problem.size() > kMaxProblem) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".problem: ", inventory.problem.size(),
                     " bytes, at most ", kMaxProblem));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MembershipTable> MembershipTable::Create(
    const MembershipOptions& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", options.world_size));
  }
  if (options.sharding_factor < 1 ||
      options.world_size % options.sharding_factor != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding_factor (", options.sharding_factor,
        ") must be >= 1 and divide world_size (", options.world_size, ")"));
  }
  if (options.detector.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease must be positive");
  }
  if (options.max_failed_epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_failed_epochs must be >= 1, got ", options.max_failed_epochs));
  }
  if (options.max_epochs_without_commit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_epochs_without_commit must be >= 1, got ",
                     options.max_epochs_without_commit));
  }
  return MembershipTable(options);
}

MembershipTable::MembershipTable(const MembershipOptions& options)
    : options_(options),
      slots_(options.world_size),
      progress_(ProgressWatchOptions{
          .max_failed_epochs = options.max_failed_epochs,
          .max_epochs_without_commit = options.max_epochs_without_commit}) {
  for (int r = 0; r < options.world_size; ++r) slots_[r].rank = r;
  if (options_.rejoin_grace <= absl::ZeroDuration()) {
    // Live members re-join within a heartbeat interval (a third of the
    // lease) of the coordinator's return; two leases leave room for a
    // loaded machine, and a wrong verdict would end the job.
    options_.rejoin_grace = 2 * options_.detector.lease;
  }
  settle_after_ = options_.started + options_.rejoin_grace;
}

std::string MembershipTable::MembershipKey() const {
  std::string key;
  for (const SlotRecord& s : slots_) {
    absl::StrAppend(&key, s.live() ? s.incarnation : std::string(), ";");
  }
  return key;
}

std::vector<RankSighting> MembershipTable::LiveSightings() const {
  std::vector<RankSighting> live;
  for (const SlotRecord& s : slots_) {
    if (s.live()) live.push_back({s.rank, s.trainer});
  }
  return live;
}

std::string MembershipTable::StallDiagnosis(const Stall& stall,
                                            MonoTime now) const {
  if (!stall.without_commit) {
    return absl::StrCat(stall.epochs,
                        " epochs in a row failed with the same members in "
                        "every slot and the same plan (",
                        PlanKindName(plan_.kind), " at step ", plan_.step,
                        "): ", absl::StrJoin(stall.causes, "; "));
  }
  return absl::StrCat(stall.epochs,
                      " epochs in a row ended without a step committed "
                      "(the last committed step is ",
                      committed_step_,
                      ") with the same members in every slot; ",
                      TrainersDuringStall(LiveSightings(), stall.since, now),
                      ". The epochs: ", absl::StrJoin(stall.causes, "; "));
}

void MembershipTable::Fail(MonoTime now, std::vector<int> ranks,
                           const std::string& why) {
  if (failed()) return;
  failure_ = why;
  was_ready_ = false;
  Log(now, DecisionKind::kJobFailed, std::move(ranks), why);
}

void MembershipTable::Replan(MonoTime now) {
  if (failed()) return;
  // Filled in place: a fresh W-slot input per call (every join while a
  // job of thousands forms) was most of a join's time, in page faults.
  PlanInput& in = plan_input_;
  in.world_size = options_.world_size;
  in.sharding_factor = options_.sharding_factor;
  in.committed_step = committed_step_;
  in.settled = now >= settle_after_;
  in.slots.resize(slots_.size());
  for (const SlotRecord& s : slots_) {
    PlanSlot& p = in.slots[s.rank];
    p.rank = s.rank;
    p.live = s.live();
    p.holds_shard = s.holds_shard;
    p.held_before = s.held_by_predecessor;
    p.reported = s.phase != MemberPhase::kEmpty;
    p.step = s.committed_step;
    p.pending_step = s.pending_step;
    p.keeps_checkpoints = s.checkpoints.keeps;
    p.checkpoints = s.checkpoints.steps;
    p.registration_state = s.live() && s.registration_state;
    p.checkpoint_problem = s.checkpoints.problem;
  }
  const bool same_epoch = plan_epoch_ == epoch_;
  const PlanKind before = plan_.kind;
  plan_ = DecideEpochPlan(in);
  plan_epoch_ = epoch_;
  if (plan_.kind == PlanKind::kFailed) {
    Fail(now, plan_.lost_holders, plan_.reason);
    return;
  }
  const bool issued = plan_.kind == PlanKind::kNew ||
                      plan_.kind == PlanKind::kResume ||
                      plan_.kind == PlanKind::kRollback;
  plan_key_ = issued ? MembershipKey() : std::string();
  if (same_epoch && before == plan_.kind) return;  // Logged already.
  for (const ShardCopy& c : plan_.copies) {
    Log(now, DecisionKind::kRecoveryPlanned, {c.target_rank},
        CopyReason(c, plan_.step));
  }
  if (plan_.kind == PlanKind::kRollback) {
    Log(now, DecisionKind::kRecoveryPlanned, plan_.restores, plan_.reason);
  }
}

void MembershipTable::Settle(MonoTime now) {
  if (!failed() && plan_.kind == PlanKind::kWait) Replan(now);
}

void MembershipTable::Log(MonoTime now, DecisionKind kind,
                          std::vector<int> ranks, std::string reason) {
  decisions_.push_back(
      {now, epoch_, kind, std::move(ranks), std::move(reason)});
  ++decisions_total_;
  while (decisions_.size() > options_.max_decisions) decisions_.pop_front();
}

void MembershipTable::StartEpoch(MonoTime now, int64_t at_least,
                                 absl::string_view why) {
  // An epoch whose plan went out to every slot and that ends unready, or
  // without a committed step, while the same members hold the slots has
  // failed; a membership change is progress of another kind (leases and
  // quarantines bound those).
  std::optional<Stall> stall;
  if (!failed()) {
    EpochEnd end;
    end.time = now;
    end.epoch = epoch_;
    end.membership = MembershipKey();
    end.planned = !plan_key_.empty() && plan_epoch_ == epoch_;
    end.planned_membership = plan_key_;
    end.ready = was_ready_;
    end.partitioned = !broken_links_.empty();
    end.cause = std::string(why);
    stall = progress_.EpochEnded(end);
  }
  epoch_ = std::max(epoch_ + 1, at_least);
  epoch_began_ = now;
  was_ready_ = false;
  ready_slots_ = 0;  // Nobody is READY for an epoch that just began.
  Log(now, DecisionKind::kEpochStarted, {},
      absl::StrCat("epoch ", epoch_, ": ", why));
  if (stall.has_value()) {
    std::vector<int> ranks;
    for (const SlotRecord& s : slots_) ranks.push_back(s.rank);
    const std::string diagnosis = StallDiagnosis(*stall, now);
    Log(now, DecisionKind::kEpochStalled, ranks, diagnosis);
    Fail(now, std::move(ranks),
         absl::StrCat("the job makes no progress: ", diagnosis));
    return;
  }
  Replan(now);
}

void MembershipTable::Remove(int rank, MemberPhase phase, MonoTime now,
                             const std::string& reason) {
  SlotRecord& slot = slots_[rank];
  if (slot.holds_shard) {
    // Its shard may have no other holder: wait for it (or a replacement)
    // before calling the shard lost.
    settle_after_ = std::max(settle_after_, now + options_.rejoin_grace);
  }
  if (CountsReady(slot)) --ready_slots_;
  slot.phase = phase;
  slot.lease_token.clear();
  slot.join_secret.clear();
  Log(now,
      phase == MemberPhase::kLeft ? DecisionKind::kMemberLeft
                                  : DecisionKind::kMemberRemoved,
      {rank}, reason);
}

bool MembershipTable::ready() const {
  if (failed() || plan_epoch_ != epoch_ || plan_key_.empty()) return false;
  return ready_slots_ == options_.world_size;
}

void MembershipTable::RecountReady() {
  ready_slots_ = 0;
  for (const SlotRecord& s : slots_) ready_slots_ += CountsReady(s) ? 1 : 0;
}

bool MembershipTable::CoalescesJoin(const JoinRequestInfo& request,
                                    bool replaced_live) const {
  if (ever_ready_ || replaced_live || epoch_ == 0 ||
      epoch_ <= request.last_epoch || plan_epoch_ != epoch_ ||
      plan_.kind != PlanKind::kWait) {
    return false;
  }
  for (const SlotRecord& s : slots_) {
    if (!s.live()) return true;
  }
  return false;
}

void MembershipTable::NoteReadiness(MonoTime now) {
  if (!was_ready_ && ready()) {
    was_ready_ = true;
    ever_ready_ = true;
    // Every member reported READY with the step its shard is at; they
    // agree (replicas copied, or everyone restored the same checkpoint).
    // A checkpoint fallback moves the cluster back to the checkpoint's
    // step: the steps after it are redone. A rollback plan is a fallback
    // even when the loss landed right after the checkpoint's step (nothing
    // to redo): shards came back from disk, not from a replica, and
    // operators count those.
    // Members whose shard the plan makes again by registration are READY
    // without it (at step 0) until their trainers register: not a step the
    // cluster went back to.
    int64_t step = std::numeric_limits<int64_t>::max();
    for (const SlotRecord& s : slots_) {
      if (s.committed_step == 0 && PlanRemakes(s.rank)) continue;
      step = std::min(step, s.committed_step);
    }
    if (step == std::numeric_limits<int64_t>::max()) step = 0;
    std::string rolled_back;
    progress_.Ready();
    if (step < committed_step_) {
      ++checkpoint_fallbacks_;
      rolled_back =
          absl::StrCat(" (checkpoint fallback: steps ", step + 1, "..",
                       committed_step_, " are lost and will be redone)");
    } else if (plan_.kind == PlanKind::kRollback) {
      ++checkpoint_fallbacks_;
      rolled_back = absl::StrCat(" (checkpoint fallback: restored step ", step,
                                 ", the step the cluster had committed; no "
                                 "step is lost)");
    }
    if (!plan_.remade_shards.empty() && step > 0) {
      rolled_back = absl::StrCat(rolled_back, " (shard",
                                 plan_.remade_shards.size() == 1 ? " " : "s ",
                                 absl::StrJoin(plan_.remade_shards, ", "),
                                 " to be made again by registering the model)");
    }
    committed_step_ = step;
    Log(now, DecisionKind::kEpochReady, {},
        absl::StrCat("epoch ", epoch_, " ready: all ", options_.world_size,
                     " members READY at step ", committed_step_, rolled_back));
  }
}

bool MembershipTable::PlanRemakes(int rank) const {
  const int index = rank % options_.sharding_factor;
  return std::find(plan_.remade_shards.begin(), plan_.remade_shards.end(),
                   index) != plan_.remade_shards.end();
}

std::vector<MemberLiveness> MembershipTable::Liveness() const {
  std::vector<MemberLiveness> live;
  for (const SlotRecord& s : slots_) {
    if (s.live()) live.push_back({s.rank, s.last_heartbeat, s.lease_expiry});
  }
  return live;
}

std::string MembershipTable::NoteJoinTimeout(MonoTime now,
                                             absl::Duration waited) {
  std::vector<int> missing;
  std::string list;
  for (const SlotRecord& s : slots_) {
    if (s.phase == MemberPhase::kReady && s.ready_epoch == epoch_) continue;
    missing.push_back(s.rank);
    absl::StrAppend(&list, list.empty() ? "" : ", ", s.rank, " (",
                    MemberPhaseName(s.phase), ")");
  }
  std::string reason =
      absl::StrCat("job not ready ", absl::FormatDuration(waited),
                   " after start: ", missing.size(), " of ",
                   options_.world_size, " slots not READY: ", list);
  Log(now, DecisionKind::kJoinTimeout, std::move(missing), reason);
  return reason;
}

MonoTime MembershipTable::next_expiry() const {
  MonoTime next = MonoTime::InfiniteFuture();
  for (const SlotRecord& s : slots_) {
    if (s.live()) next = std::min(next, s.lease_expiry);
  }
  if (!failed() && plan_.kind == PlanKind::kWait && plan_.lost_shard >= 0) {
    next = std::min(next, settle_after_);
  }
  // Behind: expired leases are held, so look again soon rather than at
  // once (their expiry is in the past).
  if (behind_since_.has_value()) {
    next = std::max(next, last_expiry_check_ + options_.detector.lease / 8);
  }
  return next;
}

std::string MembershipTable::LiveHolderToReplace(
    const JoinRequestInfo& request) const {
  for (const SlotRecord& s : slots_) {
    if (s.live() && s.identity == request.identity &&
        s.incarnation != request.incarnation &&
        (request.rank < 0 || request.rank == s.rank)) {
      return s.peer_address;
    }
  }
  return "";
}

absl::StatusOr<JoinOutcome> MembershipTable::Join(
    const JoinRequestInfo& request, MonoTime now,
    const std::string& lease_token, const HolderProbe& holder) {
  const int w = options_.world_size;
  if (failed()) {
    return absl::DataLossError(absl::StrCat("the job has failed: ", failure_));
  }
  if (request.identity.empty()) {
    return absl::InvalidArgumentError("identity must not be empty");
  }
  if (auto hp = core::ParseHostPort(request.peer_address, "peer_address");
      !hp.ok()) {
    return hp.status();
  }
  if (request.rank < -1 || request.rank >= w) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank must be -1 (any) or in [0, ", w, "), got ", request.rank));
  }
  if (lease_token.empty()) {
    return absl::InvalidArgumentError("lease_token must not be empty");
  }
  if (request.pending_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pending_step must be >= 0, got ", request.pending_step));
  }
  if (absl::Status s = ValidateInventory(request.checkpoints, "checkpoints");
      !s.ok()) {
    return s;
  }
  if (auto q = quarantines_.find(request.peer_address);
      q != quarantines_.end() && q->second.until > now) {
    const std::string why = absl::StrCat(
        "peer address ", request.peer_address, " is quarantined for another ",
        absl::FormatDuration(
            absl::Ceil(q->second.until - now, absl::Milliseconds(100))),
        " (", q->second.reason,
        "); this daemon retries, a replacement elsewhere may take the slot");
    if (!q->second.refusal_logged) {
      q->second.refusal_logged = true;
      std::vector<int> ranks;
      if (request.rank >= 0) ranks.push_back(request.rank);
      Log(now, DecisionKind::kJoinRejected, std::move(ranks),
          absl::StrCat(request.rank >= 0
                           ? absl::StrCat("rank ", request.rank, " ")
                           : std::string(),
                       "'", request.identity, "': ", why));
    }
    return absl::UnavailableError(why);
  }

  // Where is this identity now?
  int live_slot = -1;
  int previous_slot = -1;
  for (const SlotRecord& s : slots_) {
    if (s.identity != request.identity) continue;
    if (s.live()) live_slot = s.rank;
    if (previous_slot < 0) previous_slot = s.rank;
  }
  if (live_slot >= 0) {
    if (request.rank >= 0 && request.rank != live_slot) {
      return absl::AlreadyExistsError(absl::StrCat(
          "identity '", request.identity, "' is live in slot ", live_slot,
          "; it cannot also claim slot ", request.rank));
    }
    SlotRecord& s = slots_[live_slot];
    if (s.incarnation == request.incarnation) {
      // Identity and incarnation are public (MemberInfo): only the process
      // itself, which knows its secret, may be handed the token again.
      if (request.join_secret.empty() || request.join_secret != s.join_secret) {
        return absl::PermissionDeniedError(absl::StrCat(
            "identity '", request.identity, "' incarnation '",
            request.incarnation, "' is live in slot ", live_slot,
            " and this Join does not carry that process's join_secret (rule: "
            "a live member's lease_token is handed back only to the process "
            "that holds it)"));
      }
      // A retried Join of the same process: answer as before.
      JoinOutcome same;
      same.rank = live_slot;
      same.epoch = epoch_;
      same.lease_token = s.lease_token;
      same.committed_step = committed_step_;
      return same;
    }
  }

  int rank = request.rank;
  if (rank >= 0) {
    const SlotRecord& s = slots_[rank];
    if (s.live() && s.identity != request.identity) {
      return absl::AlreadyExistsError(absl::StrCat(
          "slot ", rank, " is held by live member '", s.identity, "'"));
    }
  } else if (live_slot >= 0) {
    rank = live_slot;
  } else if (previous_slot >= 0 && !slots_[previous_slot].live()) {
    rank = previous_slot;  // A stable identity maps to its old slot.
  } else {
    // A failed or departed member's slot first (a replacement), then a
    // never-used one; the lowest rank within each.
    for (bool want_used : {true, false}) {
      for (const SlotRecord& s : slots_) {
        if (!s.live() && (s.phase != MemberPhase::kEmpty) == want_used) {
          rank = s.rank;
          break;
        }
      }
      if (rank >= 0) break;
    }
    if (rank < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "no free slot: all ", w, " slots are held by live members"));
    }
  }

  if (request.holds_shard && request.model_fingerprint != 0) {
    for (const SlotRecord& s : slots_) {
      if (s.live() && s.rank != rank && s.holds_shard &&
          s.model_fingerprint != 0 &&
          s.model_fingerprint != request.model_fingerprint) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model_fingerprint ", request.model_fingerprint,
            " differs from live member ", s.rank, "'s ", s.model_fingerprint,
            ": this daemon holds a shard of another model"));
      }
    }
  }

  if (const SlotRecord& held = slots_[rank];
      held.live() && held.identity == request.identity &&
      holder.result == ProbeResult::kAlive &&
      holder.address == held.peer_address) {
    const std::string why = absl::StrCat(
        "identity '", request.identity, "' is live in slot ", rank,
        ": incarnation ", held.incarnation, " at ", held.peer_address,
        " answers probes, so a second process with this identity (",
        request.incarnation, " at ", request.peer_address,
        ") is refused; stop one of them, or give it another identity");
    Log(now, DecisionKind::kJoinRejected, {rank}, why);
    return absl::AlreadyExistsError(why);
  }

  // Accepted: from here on the table changes.
  if (decisions_total_ == 0) {
    // The first join: whoever else held shards has a grace to re-join.
    settle_after_ = std::max(settle_after_, now + options_.rejoin_grace);
  }
  SlotRecord& slot = slots_[rank];
  const bool replaced_live = slot.live();
  if (replaced_live) {
    Remove(rank, MemberPhase::kFailed, now,
           absl::StrCat("rank ", rank, " '", slot.identity,
                        "' replaced by a new incarnation"));
  }
  if (request.holds_shard) {
    committed_step_ = std::max(committed_step_, request.last_committed_step);
  }
  slot.held_by_predecessor = slot.holds_shard || slot.held_by_predecessor;
  slot.phase = MemberPhase::kJoining;
  slot.identity = request.identity;
  slot.peer_address = request.peer_address;
  slot.incarnation = request.incarnation;
  slot.lease_token = lease_token;
  slot.join_secret = request.join_secret;
  slot.joined = now;
  slot.last_heartbeat = now;
  slot.lease_expiry = now + options_.detector.lease;
  slot.committed_step =
      request.holds_shard ? request.last_committed_step : committed_step_;
  slot.ready_epoch = -1;
  slot.holds_shard = request.holds_shard;
  slot.model_fingerprint = request.model_fingerprint;
  slot.pending_step = request.holds_shard ? request.pending_step : 0;
  slot.registration_state = request.holds_shard && request.registration_state;
  slot.checkpoints = request.checkpoints;
  slot.unreachable.clear();
  slot.trainer = TrainerSighting();  // Until its first heartbeat says.
  Log(now, DecisionKind::kMemberJoined, {rank},
      absl::StrCat("rank ", rank, " joined: '", request.identity, "' at ",
                   request.peer_address,
                   request.holds_shard
                       ? absl::StrCat(" holding its shard at step ",
                                      request.last_committed_step)
                       : std::string()));
  RecountReady();
  if (CoalescesJoin(request, replaced_live)) {
    // Stays in the forming epoch; the plan is decided again (a lost shard
    // may be declared so once settled).
    Replan(now);
  } else {
    StartEpoch(now, request.last_epoch + 1,
               absl::StrCat("rank ", rank, " joined"));
  }

  JoinOutcome out;
  out.rank = rank;
  out.epoch = epoch_;
  out.lease_token = lease_token;
  out.committed_step = committed_step_;
  // The epoch's plan, if it is decided already (every slot claimed): the
  // member reads it from the membership updates in any case.
  for (const ShardCopy& c : plan_.copies) {
    if (c.target_rank != rank) continue;
    slot.phase = MemberPhase::kRecovering;
    out.recovery =
        RecoveryAssignment{rank, c.shard_index, c.source_ranks, plan_.step};
  }
  out.unrecoverable = plan_.kind == PlanKind::kRollback;
  return out;
}

absl::Status MembershipTable::Heartbeat(
    int rank, absl::string_view lease_token, int64_t epoch,
    int64_t committed_step, MemberPhase state, MonoTime now,
    std::vector<UnreachablePeer> unreachable,
    const CheckpointInventory* checkpoints, const TrainerReport* trainer,
    bool registration_state) {
  if (failed()) {
    return absl::DataLossError(absl::StrCat("the job has failed: ", failure_));
  }
  // A bound far beyond any job keeps time arithmetic finite.
  constexpr absl::Duration kMaxQuiet = absl::Hours(24 * 365 * 10);
  if (trainer != nullptr &&
      (trainer->quiet < absl::ZeroDuration() || trainer->quiet > kMaxQuiet)) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer.quiet_ms must be within [0, ",
                     absl::ToInt64Milliseconds(kMaxQuiet), "], got ",
                     absl::ToInt64Milliseconds(trainer->quiet)));
  }
  if (state != MemberPhase::kJoining && state != MemberPhase::kRecovering &&
      state != MemberPhase::kReady) {
    return absl::InvalidArgumentError(
        absl::StrCat("state must be JOINING, RECOVERING or READY, got ",
                     MemberPhaseName(state)));
  }
  if (checkpoints != nullptr) {
    if (absl::Status s = ValidateInventory(*checkpoints, "checkpoints");
        !s.ok()) {
      return s;
    }
  }
  if (rank < 0 || rank >= options_.world_size || !slots_[rank].live() ||
      slots_[rank].lease_token != lease_token) {
    return absl::NotFoundError(absl::StrCat(
        "rank ", rank,
        " is not held by a live member with this lease_token (lease expired "
        "or replaced): stop and Join again"));
  }
  SlotRecord& slot = slots_[rank];
  slot.last_heartbeat = now;
  slot.lease_expiry = now + options_.detector.lease;
  slot.unreachable = std::move(unreachable);
  if (checkpoints != nullptr) slot.checkpoints = *checkpoints;
  if (trainer != nullptr) {
    slot.trainer.Note(*trainer, now);
  }
  slot.registration_state = registration_state;
  if (!slot.unreachable.empty() || !broken_links_.empty()) {
    DecidePartitions(now);
    if (!slot.live()) {
      return absl::NotFoundError(
          absl::StrCat("rank ", rank,
                       " was removed: ", quarantines_[slot.peer_address].reason,
                       " (its address is quarantined); Join again"));
    }
  }
  if (epoch != epoch_) return absl::OkStatus();
  const bool plan_issued = !plan_key_.empty() && plan_epoch_ == epoch_;
  if (state == MemberPhase::kReady && slot.ready_epoch != epoch_) {
    const int64_t expected =
        plan_.kind == PlanKind::kNew ? int64_t{0} : plan_.step;
    if (!plan_issued) {
      // Not every slot is claimed in this epoch: nothing to be ready for.
      // (Not READY for this epoch, so not counted by ready_slots_.)
      slot.phase = MemberPhase::kJoining;
      return absl::OkStatus();
    }
    // A member whose shard the plan makes again by registration reports
    // READY without it (at step 0); its trainer's registration brings it
    // to the plan's step.
    const bool remade = committed_step == 0 && PlanRemakes(rank);
    if (committed_step != expected && !remade) {
      // The member holds its shard at another step than the plan meant:
      // plan again from what it actually holds.
      slot.committed_step = committed_step;
      slot.holds_shard = true;
      slot.pending_step = 0;
      const std::string why = absl::StrCat(
          "rank ", rank, " reported READY at step ", committed_step,
          " but epoch ", epoch_, "'s plan is step ", expected);
      StartEpoch(now, 0, why);
      return absl::FailedPreconditionError(why);
    }
    // Exactly the plan's step (a rollback lowers it).
    slot.committed_step = committed_step;
  } else {
    // Within a ready epoch steps only move forward; a heartbeat may lag a
    // commit the vote already recorded.
    slot.committed_step = std::max(slot.committed_step, committed_step);
  }
  const bool counted = CountsReady(slot);
  slot.phase = state;
  if (state == MemberPhase::kReady) {
    slot.ready_epoch = epoch_;
    slot.pending_step = 0;  // Resolved before READY.
    slot.holds_shard = true;
    // A READY member holds its shard at its committed step; the cluster's
    // committed step is the highest such step (the commit vote raises it
    // too), and replacements recover to it.
    committed_step_ = std::max(committed_step_, committed_step);
  }
  ready_slots_ += (CountsReady(slot) ? 1 : 0) - (counted ? 1 : 0);
  NoteReadiness(now);
  return absl::OkStatus();
}

void MembershipTable::DecidePartitions(MonoTime now) {
  std::vector<ReachabilityReport> reports;
  for (const SlotRecord& s : slots_) {
    if (!s.live()) continue;
    ReachabilityReport report{s.rank, {}};
    for (const UnreachablePeer& u : s.unreachable) {
      // Only reports about the slot's current holder count.
      if (u.rank >= 0 && u.rank < options_.world_size &&
          slots_[u.rank].live() &&
          slots_[u.rank].incarnation == u.incarnation) {
        report.unreachable.push_back(u.rank);
      }
    }
    reports.push_back(std::move(report));
  }
  const int live = static_cast<int>(reports.size());
  const PartitionVerdict verdict = DecidePartition(reports, (live - 1) / 2);
  // After a removal the cut-off member's links no longer count (it is not
  // live); the next heartbeat's decision brings the count down.
  broken_links_ = verdict.broken_links;
  if (verdict.kind != PartitionKind::kCutOff) {
    std::string links;
    if (verdict.kind != PartitionKind::kNone) {
      links = absl::StrJoin(verdict.broken_links, ",",
                            [](std::string* out, const std::pair<int, int>& l) {
                              absl::StrAppend(out, l.first, "-", l.second);
                            });
    }
    if (links != undecided_links_) {
      undecided_links_ = links;
      undecided_since_ = now;
    }
    // Reports arrive one heartbeat at a time, so a partition being noticed
    // passes through undecidable states; only one that lasts a lease is
    // logged (once).
    if (links.empty()) undecided_logged_.clear();
    if (!links.empty() && links != undecided_logged_ &&
        now - undecided_since_ >= options_.detector.lease) {
      undecided_logged_ = links;
      std::vector<int> ranks;
      for (const auto& l : verdict.broken_links) {
        ranks.push_back(l.first);
        ranks.push_back(l.second);
      }
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      Log(now, DecisionKind::kPartitionUndecided, std::move(ranks),
          absl::StrCat(verdict.reason, "; nobody is removed"));
    }
    return;
  }
  undecided_links_.clear();
  undecided_logged_.clear();
  for (const int r : verdict.cut_off) {
    const SlotRecord& slot = slots_[r];
    Quarantine& q = quarantines_[slot.peer_address];
    ++q.removals;
    absl::Duration length = options_.partition_quarantine;
    for (int i = 1;
         i < q.removals && length < options_.partition_quarantine_max; ++i) {
      length *= 2;
    }
    length = std::min(length, options_.partition_quarantine_max);
    q.until = now + length;
    q.refusal_logged = false;
    q.reason = absl::StrCat("rank ", r, " '", slot.identity,
                            "' was cut off from its peers");
    Remove(
        r, MemberPhase::kFailed, now,
        absl::StrCat(verdict.reason, "; its peer address ", slot.peer_address,
                     " is quarantined for ", absl::FormatDuration(length),
                     q.removals > 1 ? absl::StrCat(" (removal ", q.removals,
                                                   " from that address)")
                                    : std::string()));
  }
  StartEpoch(now, 0,
             absl::StrCat("rank", verdict.cut_off.size() == 1 ? " " : "s ",
                          absl::StrJoin(verdict.cut_off, ","),
                          " cut off from the peers"));
}

absl::Status MembershipTable::Leave(int rank, absl::string_view lease_token,
                                    absl::string_view reason, MonoTime now) {
  if (rank < 0 || rank >= options_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be in [0, ", options_.world_size, ")"));
  }
  SlotRecord& slot = slots_[rank];
  if (!slot.live()) return absl::OkStatus();  // Already gone: idempotent.
  if (slot.lease_token != lease_token) {
    return absl::NotFoundError(absl::StrCat(
        "rank ", rank, " is held by another member (lease_token differs)"));
  }
  Remove(rank, MemberPhase::kLeft, now,
         absl::StrCat("rank ", rank, " left: ", reason));
  // After the job failed members only drain: no epoch follows.
  if (!failed()) StartEpoch(now, 0, absl::StrCat("rank ", rank, " left"));
  return absl::OkStatus();
}

std::vector<int> MembershipTable::ExpireLeases(MonoTime now) {
  std::vector<int> removed;
  const std::vector<MemberLiveness> live = Liveness();
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      now, live, options_.detector, behind_since_, last_expiry_check_);
  last_expiry_check_ = now;
  if (d.stalled_for > absl::ZeroDuration() && !d.renewed.empty()) {
    ++stalls_;
    std::string list;
    for (int r : d.renewed) absl::StrAppend(&list, list.empty() ? "" : ",", r);
    Log(now, DecisionKind::kCoordinatorStalled, d.renewed,
        absl::StrCat(
            "the coordinator did not run for ",
            absl::FormatDuration(
                absl::Trunc(d.stalled_for, absl::Milliseconds(1))),
            " (no lease check since; stopped, frozen or starved), so its "
            "members' heartbeats went unread: the lease(s) of rank(s) ",
            list, " that ran out meanwhile renewed once instead of expiring"));
  }
  if (d.deferred > 0 && !behind_deferred_) {
    behind_deferred_ = true;
    ++expiry_deferrals_;
    Log(now, DecisionKind::kLeaseExpiryDeferred, {},
        absl::StrCat(
            "lease expiry held back: ", d.late, " of ", live.size(),
            " members are late at once, so the coordinator is "
            "behind (or cut off from them); ",
            d.deferred, " expired lease(s) kept for up to ",
            absl::FormatDuration(options_.detector.max_expiry_deferral)));
  }
  for (int r : d.renewed) {
    slots_[r].lease_expiry = now + options_.detector.lease;
  }
  if (!d.behind && behind_deferred_) {
    Log(now, DecisionKind::kLeaseExpiryDeferred, {},
        absl::StrCat("lease expiry resumed after ",
                     absl::FormatDuration(now - *behind_since_), ": ", d.late,
                     " of ", live.size(), " members late; ", d.renewed.size(),
                     " lease(s) that ran out meanwhile renewed once"));
  }
  if (d.behind) {
    if (!behind_since_.has_value()) behind_since_ = now;
  } else {
    behind_since_.reset();
    behind_deferred_ = false;
  }
  for (const Removal& r : d.removals) {
    Remove(r.rank, MemberPhase::kFailed, now, r.reason);
    removed.push_back(r.rank);
  }
  if (!removed.empty()) {
    std::string list;
    for (int r : removed) absl::StrAppend(&list, list.empty() ? "" : ",", r);
    StartEpoch(now, 0, absl::StrCat("lease expired: rank(s) ", list));
  }
  Settle(now);
  return removed;
}

absl::StatusOr<ReportOutcome> MembershipTable::ReportFailure(
    int reporter, absl::string_view lease_token, int64_t epoch, int suspect,
    absl::string_view detail, ProbeResult probe, MonoTime now) {
  const int w = options_.world_size;
  if (failed()) {
    return absl::DataLossError(absl::StrCat("the job has failed: ", failure_));
  }
  if (suspect < -1 || suspect >= w || suspect == reporter) {
    return absl::InvalidArgumentError(absl::StrCat(
        "suspect_rank must be in [0, ", w,
        ") and differ from the reporter, or -1 (unknown), got ", suspect));
  }
  if (reporter < 0 || reporter >= w || !slots_[reporter].live() ||
      slots_[reporter].lease_token != lease_token) {
    return absl::NotFoundError(
        absl::StrCat("reporter rank ", reporter, " is not a live member"));
  }
  if (epoch < epoch_) {
    return absl::AbortedError(
        absl::StrCat("epoch ", epoch,
                     " is stale: the failure was handled by epoch ", epoch_));
  }
  if (epoch > epoch_) {
    return absl::FailedPreconditionError(
        absl::StrCat("epoch ", epoch, " has not begun (current ", epoch_, ")"));
  }
  if (suspect == -1) {
    // The reporter's communicators broke without a known culprit (a
    // restarted trainer left its collectives unmatched, a peer reset the
    // connection): nobody is removed, a dead peer's lease expires on its
    // own, and everyone gets fresh communicators.
    std::string why = absl::StrCat(
        "rank ", reporter, " reported its communicators broken (no suspect) [",
        detail, "]");
    // A peer whose trainer has not called in this epoch is the likeliest
    // reason (its daemon issues nothing while its trainer is away).
    if (const std::vector<std::string> quiet =
            QuietTrainers(LiveSightings(), epoch_began_, now);
        !quiet.empty()) {
      absl::StrAppend(&why, "; in this epoch ", absl::StrJoin(quiet, ", "));
    }
    Log(now, DecisionKind::kFailureReportDismissed, {reporter}, why);
    StartEpoch(now, 0, why);
    ReportOutcome out;
    out.epoch = epoch_;
    out.decision = why;
    return out;
  }
  const Accusation report{reporter, suspect, now};
  const ReportDecision d = DecideReport(now, report, Liveness(), accusations_,
                                        probe, options_.detector);
  // Keep the window's accusations only.
  accusations_.erase(
      std::remove_if(accusations_.begin(), accusations_.end(),
                     [&](const Accusation& a) {
                       return now - a.time >
                              options_.detector.accusation_window;
                     }),
      accusations_.end());
  accusations_.push_back(report);

  ReportOutcome out;
  const std::string full = absl::StrCat(d.reason, " [", detail, "]");
  if (d.removals.empty()) {
    Log(now, DecisionKind::kFailureReportDismissed, {reporter, suspect}, full);
  }
  for (const Removal& r : d.removals) {
    Remove(r.rank, MemberPhase::kFailed, now,
           absl::StrCat(r.reason, " [", detail, "]"));
    out.removed.push_back(r.rank);
  }
  StartEpoch(now, 0,
             absl::StrCat("collective failure reported by rank ", reporter));
  out.epoch = epoch_;
  out.decision = full;
  return out;
}

std::optional<int> MembershipTable::LiveRankOf(
    absl::string_view lease_token) const {
  if (lease_token.empty()) return std::nullopt;
  for (const SlotRecord& s : slots_) {
    if (s.live() && s.lease_token == lease_token) return s.rank;
  }
  return std::nullopt;
}

bool MembershipTable::IsLiveMember(int rank,
                                   absl::string_view lease_token) const {
  return rank >= 0 && rank < options_.world_size && slots_[rank].live() &&
         slots_[rank].lease_token == lease_token;
}

void MembershipTable::CommitStep(int64_t step) {
  if (step > committed_step_) progress_.Committed();
  committed_step_ = std::max(committed_step_, step);
  // Every member voted yes on it: each applied it or holds it in doubt and
  // applies it at the next epoch, whatever its last heartbeat said.
  for (SlotRecord& s : slots_) {
    if (s.live() && s.ready_epoch == epoch_) {
      s.committed_step = std::max(s.committed_step, step);
    }
  }
}

void MembershipTable::NoteCommitRejected(int64_t step, std::vector<int> ranks,
                                         const std::string& reason,
                                         MonoTime now) {
  Log(now, DecisionKind::kCommitRejected, std::move(ranks),
      absl::StrCat("step ", step, ": ", reason));
}

}  // namespace shardd::coordinator
