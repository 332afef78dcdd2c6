#include "daemon/coordinator/coordinator_proto.h"

#include "daemon/core/shard_plan.h"

namespace shardd::coordinator {

namespace pb = ::shardd::v1;

int64_t UnixMs(absl::Time t) {
  if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return 0;
  return absl::ToUnixMillis(t);
}

// A monotonic time of the snapshot's as wall-clock milliseconds, for people.
int64_t UnixMs(const ClusterSnapshot& s, MonoTime t) {
  if (t == MonoTime::InfinitePast() || t == MonoTime::InfiniteFuture()) {
    return 0;
  }
  return UnixMs(s.WallTimeOf(t));
}

pb::MemberState ToProto(MemberPhase phase) {
  switch (phase) {
    case MemberPhase::kEmpty:
      return pb::MEMBER_STATE_EMPTY;
    case MemberPhase::kJoining:
      return pb::MEMBER_STATE_JOINING;
    case MemberPhase::kRecovering:
      return pb::MEMBER_STATE_RECOVERING;
    case MemberPhase::kReady:
      return pb::MEMBER_STATE_READY;
    case MemberPhase::kFailed:
      return pb::MEMBER_STATE_FAILED;
    case MemberPhase::kLeft:
      return pb::MEMBER_STATE_LEFT;
  }
  return pb::MEMBER_STATE_UNSPECIFIED;
}

pb::DecisionKind ToProto(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kMemberJoined:
      return pb::DECISION_KIND_MEMBER_JOINED;
    case DecisionKind::kJoinRejected:
      return pb::DECISION_KIND_JOIN_REJECTED;
    case DecisionKind::kMemberRemoved:
      return pb::DECISION_KIND_MEMBER_REMOVED;
    case DecisionKind::kMemberLeft:
      return pb::DECISION_KIND_MEMBER_LEFT;
    case DecisionKind::kEpochStarted:
      return pb::DECISION_KIND_EPOCH_STARTED;
    case DecisionKind::kEpochReady:
      return pb::DECISION_KIND_EPOCH_READY;
    case DecisionKind::kRecoveryPlanned:
      return pb::DECISION_KIND_RECOVERY_PLANNED;
    case DecisionKind::kFailureReportDismissed:
      return pb::DECISION_KIND_FAILURE_REPORT_DISMISSED;
    case DecisionKind::kUnrecoverable:
      return pb::DECISION_KIND_UNRECOVERABLE;
    case DecisionKind::kJoinTimeout:
      return pb::DECISION_KIND_JOIN_TIMEOUT;
    case DecisionKind::kCommitRejected:
      return pb::DECISION_KIND_COMMIT_REJECTED;
    case DecisionKind::kPartitionUndecided:
      return pb::DECISION_KIND_PARTITION_UNDECIDED;
    case DecisionKind::kEpochStalled:
      return pb::DECISION_KIND_EPOCH_STALLED;
    case DecisionKind::kJobFailed:
      return pb::DECISION_KIND_JOB_FAILED;
    case DecisionKind::kLeaseExpiryDeferred:
      return pb::DECISION_KIND_LEASE_EXPIRY_DEFERRED;
    case DecisionKind::kCoordinatorStalled:
      return pb::DECISION_KIND_COORDINATOR_STALLED;
  }
  return pb::DECISION_KIND_UNSPECIFIED;
}

void FillMember(const ClusterSnapshot& snap, const SlotRecord& s,
                pb::MemberInfo* m) {
  m->set_rank(s.rank);
  m->set_identity(s.identity);
  m->set_peer_address(s.peer_address);
  m->set_incarnation(s.incarnation);
  m->set_state(ToProto(s.phase));
  m->set_committed_step(s.committed_step);
  m->set_lease_expiry_unix_ms(UnixMs(snap, s.lease_expiry));
  m->set_joined_unix_ms(UnixMs(snap, s.joined));
  if (s.trainer.attached) {
    m->set_trainer_last_call_unix_ms(UnixMs(snap, s.trainer.last_call));
  }
}

void FillTopology(int world_size, int sharding_factor, int rank,
                  pb::Topology* t) {
  t->set_world_size(world_size);
  t->set_sharding_factor(sharding_factor);
  t->set_rank(rank);
  // The same placement rule as the daemons use (daemon/core/shard_plan).
  auto plan = core::ShardPlan::Create(
      world_size, core::ShardingStrategy::kHybridShard, sharding_factor);
  if (!plan.ok()) return;
  auto p = plan->Placement(rank);
  if (!p.ok()) return;
  t->set_shard_index(static_cast<int32_t>(p->shard_index));
  t->set_shard_group(static_cast<int32_t>(p->shard_group));
  for (int64_t r : p->shard_group_ranks) t->add_shard_group_ranks(r);
  for (int64_t r : p->replica_group_ranks) t->add_replica_group_ranks(r);
}

pb::EpochPlanKind ToProto(PlanKind kind) {
  switch (kind) {
    case PlanKind::kWait:
      return pb::EPOCH_PLAN_KIND_WAIT;
    case PlanKind::kNew:
      return pb::EPOCH_PLAN_KIND_NEW;
    case PlanKind::kResume:
      return pb::EPOCH_PLAN_KIND_RESUME;
    case PlanKind::kRollback:
      return pb::EPOCH_PLAN_KIND_ROLLBACK;
    case PlanKind::kFailed:
      return pb::EPOCH_PLAN_KIND_FAILED;
  }
  return pb::EPOCH_PLAN_KIND_UNSPECIFIED;
}

void FillPlan(const ClusterSnapshot& s, pb::RecoveryPlan* out) {
  out->set_epoch(s.epoch);
  out->set_kind(ToProto(s.plan.kind));
  out->set_step(s.plan.step);
  out->set_reason(s.plan.reason);
  for (const ShardCopy& c : s.plan.copies) {
    pb::ShardTransfer* t = out->add_transfers();
    t->set_target_rank(c.target_rank);
    t->set_shard_index(c.shard_index);
    for (int r : c.source_ranks) t->add_source_ranks(r);
    t->set_step(s.plan.step);
    t->set_phase(pb::RECOVERY_PHASE_TRANSFERRING_STATE);
  }
  for (int r : s.plan.restores) out->add_restore_ranks(r);
  out->set_phase(s.failed  ? pb::RECOVERY_PHASE_UNRECOVERABLE
                 : s.ready ? pb::RECOVERY_PHASE_COMPLETE
                 : !s.plan.copies.empty() || !s.plan.restores.empty()
                     ? pb::RECOVERY_PHASE_TRANSFERRING_STATE
                 : s.plan.kind == PlanKind::kWait
                     ? pb::RECOVERY_PHASE_AWAITING_REPLACEMENT
                     : pb::RECOVERY_PHASE_REBUILDING_COMMUNICATORS);
}

void FillUpdate(const ClusterSnapshot& s, bool keepalive,
                pb::MembershipUpdate* u) {
  u->set_epoch(s.epoch);
  u->set_ready(s.ready);
  u->set_reason(keepalive ? "keepalive" : s.last_reason);
  u->set_world_size(s.world_size);
  u->set_sharding_factor(s.sharding_factor);
  u->set_committed_step(s.committed_step);
  u->set_keepalive(keepalive);
  for (const SlotRecord& slot : s.slots) {
    if (slot.live()) FillMember(s, slot, u->add_members());
  }
  u->set_job_state(s.failed ? pb::JOB_STATE_FAILED : pb::JOB_STATE_RUNNING);
  u->set_job_failure(s.failure);
  FillPlan(s, u->mutable_plan());
  u->set_live_members(s.live_members);
}

}  // namespace shardd::coordinator
