#ifndef SHARDD_DAEMON_NODE_MEMBERSHIP_H_
#define SHARDD_DAEMON_NODE_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/coordinator/membership_view.h"
#include "daemon/core/mono_time.h"
#include "shardd/v1/common.pb.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::node {

// The node's only view of the job's membership (a port): which slot it
// holds, the membership it sees, and what it tells the coordinator. The
// daemon's implementation is MemberClientMembership (the coordinator's gRPC
// protocol, daemon/node/member_client_membership.h); tests of the node's
// decisions use a scripted fake. The node layer includes no gRPC header
// for it.
//
// Implementations are thread-safe: the epoch driver, trainer operations and
// status readers call them concurrently.
class Membership {
 public:
  virtual ~Membership() = default;

  // This member's slot (rank) and the process's incarnation.
  virtual int rank() const = 0;
  virtual std::string incarnation() const = 0;
  // The newest view.
  virtual coordinator::MembershipView view() const = 0;
  // Blocks until `predicate(view)` holds and returns that view;
  // DEADLINE_EXCEEDED at `deadline`; the membership's end (view().error,
  // DATA_LOSS when the job failed) when it ended. The predicate must be
  // cheap and must not call back.
  virtual absl::StatusOr<coordinator::MembershipView> WaitFor(
      std::function<bool(const coordinator::MembershipView&)> predicate,
      MonoTime deadline) const = 0;
  // This member is READY in `epoch` at `committed_step` (its communicators
  // are up, its shard is at that step); the coordinator hears it at once.
  virtual absl::Status SetReady(int64_t epoch, int64_t committed_step) = 0;
  // A failure seen in `epoch` (-1: the newest), naming `suspect` (-1: no
  // culprit known). ABORTED: a later epoch already handles it.
  virtual absl::Status ReportFailure(int suspect, v1::FailureKind kind,
                                     absl::string_view detail,
                                     int64_t epoch) = 0;
  // Tells the coordinator this member's state now (e.g. a checkpoint that
  // went bad, before the next epoch is planned).
  virtual absl::Status SendHeartbeat() = 0;
  // The commit vote on `step` of `epoch`, with this member's vote and step
  // fingerprint; blocks until every member voted or `deadline`.
  virtual absl::StatusOr<v1::ShouldCommitResponse> ShouldCommit(
      int64_t epoch, int64_t step, bool vote, absl::string_view reason,
      uint64_t step_fingerprint, MonoTime deadline) = 0;
  // The lease token of this member's current session once no re-join is
  // under way (waiting until `deadline`): what the rendezvous store checks.
  virtual std::string SettledLeaseToken(MonoTime deadline) const = 0;
  // Leaves the job for good.
  virtual absl::Status Leave(absl::string_view reason) = 0;
  // The newest checkpoint step every rank holds, as the coordinator last
  // said (v1::HeartbeatResponse.common_checkpoint_step); -1: not known.
  virtual int64_t common_checkpoint_step() const { return -1; }
};

// What a member joins with: who it is, and what it tells the coordinator at
// every join and heartbeat. The callbacks run on the membership's threads
// without its lock; they must be cheap and must not call it.
struct MembershipJoin {
  // The slot to claim (-1: any), a stable identity, this member's Peer
  // service and facts for tools (MemberInfo.info).
  int rank = -1;
  std::string identity;
  std::string peer_address;
  std::map<std::string, std::string> info;
  // How long the first join keeps trying while the coordinator is away.
  absl::Duration initial_join_timeout = absl::Seconds(30);
  std::function<coordinator::MemberShardStatus()> shard_status;
  std::function<v1::CheckpointInventory()> checkpoints;
  // Null: none reported.
  std::function<std::vector<v1::UnreachablePeer>()> unreachable_peers;
  // What the member knows of its trainer, sent with every heartbeat. Null:
  // not reported.
  std::function<v1::TrainerPresence()> trainer;
};

// Joins the job (the daemon: the coordinator's gRPC protocol, from
// coordinator_ports.h); the join's error otherwise.
using JoinMembership =
    std::function<absl::StatusOr<std::unique_ptr<Membership>>(
        const MembershipJoin& join)>;

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_MEMBERSHIP_H_
