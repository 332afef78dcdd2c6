#ifndef SHARDD_DAEMON_COORDINATOR_MEMBERSHIP_VIEW_H_
#define SHARDD_DAEMON_COORDINATOR_MEMBERSHIP_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/mono_time.h"
#include "shardd/v1/common.pb.h"

// What a member knows of the membership and tells about itself: plain
// values, without gRPC, so that the daemon's node layer can read them
// through its Membership port (daemon/node/membership.h).

namespace shardd::coordinator {

// What a member holds, asked for at every (re-)join so that a restarted
// coordinator can rebuild membership from the members.
struct MemberShardStatus {
  bool holds_shard = false;
  int64_t committed_step = 0;
  uint64_t model_fingerprint = 0;
  // An in-doubt step held prepared (0: none).
  int64_t pending_step = 0;
  // The shard is what registering the model made, nothing committed since
  // (JoinRequest.registration_state).
  bool registration_state = false;
};

// The member's picture of the cluster, from the WatchMembership stream.
struct MembershipView {
  // Never decreases: updates of an older epoch (e.g. the empty state of a
  // just-restarted coordinator before anyone re-joined) are not applied.
  int64_t epoch = 0;
  bool ready = false;
  int world_size = 0;
  int sharding_factor = 0;
  int64_t committed_step = 0;
  // Live members of `epoch`, by rank: all of them from a coordinator that
  // predates scoped watch streams, else those of this member's shard group
  // and replica group (the peers it exchanges data with; see
  // WatchMembershipRequest.scoped). A member's entry is as of when its
  // holder joined (its state and step are not kept current).
  std::vector<shardd::v1::MemberInfo> members;
  // Live members in the whole job (all W slots); -1: unknown, count
  // `members` instead.
  int live_members = -1;
  // Why the last change happened.
  std::string reason;
  // Watch messages applied that were not keepalives.
  int64_t updates = 0;
  // The coordinator's plan for `epoch` (kind WAIT until every slot is
  // claimed): a copy or a checkpoint restore this member performs before
  // it reports READY.
  shardd::v1::RecoveryPlan plan;

  // This member: its slot, how often it joined (1 + re-joins), when it last
  // heard from the coordinator.
  int rank = -1;
  int64_t joins = 0;
  MonoTime last_contact = MonoTime::InfinitePast();
  // Set when the member can no longer take part (a re-join was rejected,
  // or it left): the status that ended it. DATA_LOSS: the job has failed
  // (terminal; the message says why).
  absl::Status error;

  // Live members in the whole job.
  int LiveCount() const {
    return live_members >= 0 ? live_members : static_cast<int>(members.size());
  }
  // True when every one of the W slots is held by a live member.
  bool AllLive() const { return world_size > 0 && LiveCount() == world_size; }
  // True when `rank` is held in this view by the process `incarnation`
  // (not by a successor that took the slot).
  bool HeldBy(int rank, const std::string& incarnation) const {
    for (const shardd::v1::MemberInfo& m : members) {
      if (m.rank() == rank) return m.incarnation() == incarnation;
    }
    return false;
  }
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_MEMBERSHIP_VIEW_H_
