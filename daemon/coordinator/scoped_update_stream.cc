#include "daemon/coordinator/scoped_update_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator_proto.h"

namespace shardd::coordinator {

namespace pb = ::shardd::v1;

absl::Status ScopedUpdateStream::CheckRank(int rank, int world_size) {
  if (rank == -1 || (rank >= 0 && rank < world_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("WatchMembershipRequest.rank ", rank,
                   " with scoped: must be -1 (every member) or a rank in [0, ",
                   world_size, ")"));
}

bool ScopedUpdateStream::InScope(int r, int factor) const {
  if (rank_ < 0 || factor <= 0) return true;
  return r / factor == rank_ / factor || r % factor == rank_ % factor;
}

std::optional<pb::MembershipUpdate> ScopedUpdateStream::Next(
    const MembershipChanges& changes) {
  const ClusterSnapshot& s = changes.snapshot;
  const bool first = seen_ < 0;
  seen_ = changes.version;
  pb::MembershipUpdate u;
  u.set_epoch(s.epoch);
  u.set_ready(s.ready);
  u.set_reason(s.last_reason);
  u.set_world_size(s.world_size);
  u.set_sharding_factor(s.sharding_factor);
  u.set_committed_step(s.committed_step);
  u.set_job_state(s.failed ? pb::JOB_STATE_FAILED : pb::JOB_STATE_RUNNING);
  u.set_job_failure(s.failure);
  u.set_live_members(s.live_members);
  FillPlan(s, u.mutable_plan());
  if (rank_ >= 0) {
    // Only the plan's items about this member: a rollback lists every
    // rank, and a member acts on its own items only.
    pb::RecoveryPlan* plan = u.mutable_plan();
    auto& transfers = *plan->mutable_transfers();
    transfers.erase(std::remove_if(transfers.begin(), transfers.end(),
                                   [&](const pb::ShardTransfer& t) {
                                     return t.target_rank() != rank_;
                                   }),
                    transfers.end());
    const bool restores =
        std::find(plan->restore_ranks().begin(), plan->restore_ranks().end(),
                  rank_) != plan->restore_ranks().end();
    plan->clear_restore_ranks();
    if (restores) plan->add_restore_ranks(rank_);
  }
  // The plan's reason is left out: while the job forms it counts the
  // slots claimed, which is no news worth a message to every member.
  pb::RecoveryPlan plan_items = u.plan();
  plan_items.clear_reason();
  const std::string key =
      absl::StrCat(u.epoch(), "/", u.ready(), "/", u.job_state(), "/",
                   plan_items.SerializeAsString());
  header_ = u;
  u.set_delta(!changes.full);
  bool news = first || key != header_key_;
  header_key_ = key;
  for (const SlotRecord& slot : s.slots) {
    if (!InScope(slot.rank, s.sharding_factor)) continue;
    if (slot.live()) {
      FillMember(s, slot, u.add_members());
      news = true;
    } else if (!changes.full) {
      u.add_removed_ranks(slot.rank);
      news = true;
    }
  }
  if (!news) return std::nullopt;
  return u;
}

pb::MembershipUpdate ScopedUpdateStream::Keepalive() const {
  pb::MembershipUpdate u = header_;
  u.set_reason("keepalive");
  u.set_keepalive(true);
  u.set_delta(true);
  return u;
}

}  // namespace shardd::coordinator
