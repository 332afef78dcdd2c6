#include "daemon/coordinator/coordinator_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator_proto.h"
#include "daemon/coordinator/scoped_update_stream.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"

namespace shardd::coordinator {
namespace {

namespace pb = ::shardd::v1;

// A WatchMembership stream refused before it starts: finishes with
// `status` at once and deletes itself when gRPC is done with it.
class RefusedWatch final
    : public grpc::ServerWriteReactor<pb::MembershipUpdate> {
 public:
  explicit RefusedWatch(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

absl::StatusOr<MemberPhase> FromProto(pb::MemberState state) {
  switch (state) {
    case pb::MEMBER_STATE_JOINING:
      return MemberPhase::kJoining;
    case pb::MEMBER_STATE_RECOVERING:
      return MemberPhase::kRecovering;
    case pb::MEMBER_STATE_READY:
      return MemberPhase::kReady;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("state must be JOINING, RECOVERING or READY, got ",
                       pb::MemberState_Name(state)));
  }
}

CheckpointInventory FromProto(const pb::CheckpointInventory& in) {
  CheckpointInventory out;
  out.keeps = in.keeps();
  out.steps.assign(in.steps().begin(), in.steps().end());
  out.problem = in.problem();
  return out;
}

// The client's deadline, capped at `cap` from now.
MonoTime Deadline(grpc::ServerContext* context, absl::Duration cap) {
  return std::min(MonoNow() + cap, rpc::DeadlineOf(*context));
}

}  // namespace

grpc::Status CoordinatorService::Join(grpc::ServerContext*,
                                      const pb::JoinRequest* request,
                                      pb::JoinResponse* response) {
  JoinRequestInfo info;
  info.rank = request->has_rank() ? request->rank() : -1;
  info.identity = request->identity();
  info.peer_address = request->peer_address();
  info.incarnation = request->incarnation();
  info.last_epoch = request->last_epoch();
  info.holds_shard = request->holds_shard();
  info.registration_state = request->registration_state();
  info.last_committed_step = request->last_committed_step();
  info.model_fingerprint = request->model_fingerprint();
  info.pending_step = request->pending_step();
  info.pending_step_fingerprint = request->pending_step_fingerprint();
  info.checkpoints = FromProto(request->checkpoints());
  info.join_secret = request->join_secret();
  absl::StatusOr<JoinOutcome> out = manager_->Join(info);
  if (!out.ok()) return rpc::ToGrpc(out.status());
  const bool all = !request->omit_members();
  const ClusterSnapshot s = manager_->JoinView(out->rank, all);
  for (const SlotRecord& slot : s.slots) {
    if (slot.rank == out->rank) {
      FillMember(s, slot, response->mutable_member());
    }
    if (slot.live()) FillMember(s, slot, response->add_members());
  }
  response->set_epoch(out->epoch);
  FillTopology(s.world_size, s.sharding_factor, out->rank,
               response->mutable_topology());
  response->set_lease_token(out->lease_token);
  response->set_lease_ms(absl::ToInt64Milliseconds(s.lease));
  response->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(heartbeat_interval_));
  response->set_committed_step(out->committed_step);
  response->set_ready(s.ready);
  if (out->recovery.has_value()) {
    pb::ShardTransfer* t = response->mutable_recovery();
    t->set_target_rank(out->recovery->target_rank);
    t->set_shard_index(out->recovery->shard_index);
    for (int r : out->recovery->source_ranks) t->add_source_ranks(r);
    t->set_step(out->recovery->step);
    t->set_phase(pb::RECOVERY_PHASE_TRANSFERRING_STATE);
  } else if (out->unrecoverable) {
    pb::ShardTransfer* t = response->mutable_recovery();
    t->set_target_rank(out->rank);
    t->set_shard_index(out->rank % s.sharding_factor);
    t->set_step(out->committed_step);
    t->set_phase(pb::RECOVERY_PHASE_UNRECOVERABLE);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext*,
                                           const pb::HeartbeatRequest* request,
                                           pb::HeartbeatResponse* response) {
  absl::StatusOr<MemberPhase> state = FromProto(request->state());
  if (!state.ok()) return rpc::ToGrpc(state.status());
  std::vector<UnreachablePeer> unreachable;
  unreachable.reserve(request->unreachable_peers_size());
  for (const pb::UnreachablePeer& u : request->unreachable_peers()) {
    unreachable.push_back(
        {u.rank(), u.incarnation(), u.failed_probes(), u.error()});
  }
  std::optional<CheckpointInventory> checkpoints;
  if (request->has_checkpoints()) {
    checkpoints = FromProto(request->checkpoints());
  }
  std::optional<TrainerReport> trainer;
  if (request->has_trainer()) {
    trainer.emplace();
    trainer->attached = request->trainer().attached();
    trainer->quiet = absl::Milliseconds(request->trainer().quiet_ms());
  }
  LeaseView lease;
  absl::Status s = manager_->Heartbeat(
      request->rank(), request->lease_token(), request->epoch(),
      request->committed_step(), *state, std::move(unreachable),
      checkpoints.has_value() ? &*checkpoints : nullptr, &lease,
      trainer.has_value() ? &*trainer : nullptr, request->registration_state());
  if (!s.ok()) return rpc::ToGrpc(s);
  response->set_lease_expiry_unix_ms(UnixMs(lease.lease_expiry_wall));
  response->set_lease_ms(absl::ToInt64Milliseconds(lease.lease));
  response->set_epoch(lease.epoch);
  response->set_ready(lease.ready);
  response->set_common_checkpoint_step(lease.common_checkpoint_step);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Leave(grpc::ServerContext*,
                                       const pb::LeaveRequest* request,
                                       pb::LeaveResponse* response) {
  absl::Status s = manager_->Leave(request->rank(), request->lease_token(),
                                   request->reason());
  if (!s.ok()) return rpc::ToGrpc(s);
  response->set_epoch(manager_->Snapshot(0).epoch);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<pb::MembershipUpdate>*
CoordinatorService::WatchMembership(grpc::CallbackServerContext* context,
                                    const pb::WatchMembershipRequest* request) {
  if (request->scoped()) {
    if (absl::Status s = ScopedUpdateStream::CheckRank(request->rank(),
                                                       manager_->world_size());
        !s.ok()) {
      return new RefusedWatch(rpc::ToGrpc(s));
    }
  }
  return watches_.Open(context, *request);
}

grpc::Status CoordinatorService::ReportFailure(
    grpc::ServerContext*, const pb::ReportFailureRequest* request,
    pb::ReportFailureResponse* response) {
  if (request->kind() == pb::FAILURE_KIND_UNSPECIFIED) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "kind must be set");
  }
  absl::StatusOr<ReportOutcome> out = manager_->ReportFailure(
      request->reporter_rank(), request->lease_token(), request->epoch(),
      request->suspect_rank(),
      absl::StrCat(pb::FailureKind_Name(request->kind()), ": ",
                   request->detail()));
  if (!out.ok()) return rpc::ToGrpc(out.status());
  response->set_epoch(out->epoch);
  response->set_suspect_removed(
      std::find(out->removed.begin(), out->removed.end(),
                request->suspect_rank()) != out->removed.end());
  response->set_decision(out->decision);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ShouldCommit(
    grpc::ServerContext* context, const pb::ShouldCommitRequest* request,
    pb::ShouldCommitResponse* response) {
  absl::StatusOr<CommitDecision> d = manager_->ShouldCommit(
      request->epoch(), request->step(),
      CommitVote{request->rank(), request->vote(), request->reason(),
                 request->step_fingerprint()},
      request->lease_token(), Deadline(context, max_rendezvous_wait_));
  if (!d.ok()) return rpc::ToGrpc(d.status());
  response->set_commit(d->commit);
  response->set_epoch(d->epoch);
  response->set_step(d->step);
  response->set_reason(d->reason);
  for (int r : d->dissenting) response->add_dissenting_ranks(r);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RendezvousSet(
    grpc::ServerContext*, const pb::RendezvousSetRequest* request,
    pb::RendezvousSetResponse*) {
  return rpc::ToGrpc(manager_->RendezvousSet(
      request->lease_token(), request->epoch(), request->key(),
      request->value(), request->if_absent()));
}

grpc::Status CoordinatorService::RendezvousGet(
    grpc::ServerContext*, const pb::RendezvousGetRequest* request,
    pb::RendezvousGetResponse* response) {
  absl::StatusOr<std::string> value = manager_->RendezvousGet(
      request->lease_token(), request->epoch(), request->key());
  if (!value.ok()) return rpc::ToGrpc(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RendezvousWait(
    grpc::ServerContext* context, const pb::RendezvousWaitRequest* request,
    pb::RendezvousWaitResponse* response) {
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      manager_->RendezvousWait(request->lease_token(), request->epoch(), keys,
                               Deadline(context, max_rendezvous_wait_));
  if (!values.ok()) return rpc::ToGrpc(values.status());
  for (size_t i = 0; i < keys.size(); ++i) {
    pb::KeyValue* kv = response->add_entries();
    kv->set_key(keys[i]);
    kv->set_value((*values)[i]);
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetClusterState(
    grpc::ServerContext*, const pb::GetClusterStateRequest* request,
    pb::ClusterState* response) {
  const int max = request->max_decisions() > 0 ? request->max_decisions() : 100;
  const ClusterSnapshot s = manager_->Snapshot(max);
  response->set_epoch(s.epoch);
  response->set_ready(s.ready);
  response->set_world_size(s.world_size);
  response->set_sharding_factor(s.sharding_factor);
  response->set_committed_step(s.committed_step);
  for (const SlotRecord& slot : s.slots) {
    pb::SlotState* out = response->add_slots();
    out->set_rank(slot.rank);
    out->set_state(ToProto(slot.phase));
    if (slot.phase != MemberPhase::kEmpty)
      FillMember(s, slot, out->mutable_member());
  }
  for (const Decision& d : s.decisions) {
    pb::Decision* out = response->add_decisions();
    out->set_time_unix_ms(UnixMs(s, d.time));
    out->set_epoch(d.epoch);
    out->set_kind(ToProto(d.kind));
    for (int r : d.ranks) out->add_ranks(r);
    out->set_reason(d.reason);
  }
  response->set_lease_ms(absl::ToInt64Milliseconds(s.lease));
  response->set_coordinator_started_unix_ms(UnixMs(s.started));
  for (const auto& [address, q] : s.quarantines) {
    pb::QuarantinedAddress* out = response->add_quarantines();
    out->set_peer_address(address);
    out->set_until_unix_ms(UnixMs(s, q.until));
    out->set_removals(q.removals);
    out->set_reason(q.reason);
  }
  for (const auto& [a, b] : s.broken_links) {
    pb::PeerLink* out = response->add_broken_links();
    out->set_rank_a(a);
    out->set_rank_b(b);
  }
  response->set_job_state(s.failed ? pb::JOB_STATE_FAILED
                                   : pb::JOB_STATE_RUNNING);
  response->set_job_failure(s.failure);
  FillPlan(s, response->mutable_plan());
  return grpc::Status::OK;
}

}  // namespace shardd::coordinator
