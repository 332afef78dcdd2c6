#ifndef SHARDD_DAEMON_COORDINATOR_SCOPED_UPDATE_STREAM_H_
#define SHARDD_DAEMON_COORDINATOR_SCOPED_UPDATE_STREAM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::coordinator {

// The messages of one scoped WatchMembership stream
// (WatchMembershipRequest.scoped), so that what a membership change costs
// each watcher does not grow with W for a fixed F.
//
// Responsibility: from the manager's shared MembershipChanges, the update
// this stream is owed: the members in its scope (the watcher's shard group
// and replica group; everyone for rank -1), all of them in the first
// message and afterwards only those whose holder changed (delta, with the
// removed ranks); the plan's items about the watcher only; nothing at all
// when a change concerns neither its scope nor its header (epoch,
// readiness, job state, its plan items). Pure: no I/O, no clock.
//
// Not thread-safe: one per stream.
class ScopedUpdateStream {
 public:
  // `rank` -1: every member is in scope (a tool).
  explicit ScopedUpdateStream(int rank) : rank_(rank) {}

  // INVALID_ARGUMENT naming the rank unless it is -1 or in [0, world_size):
  // a scoped stream of a rank the job does not have would get a scope no
  // member has.
  static absl::Status CheckRank(int rank, int world_size);

  // The message for `changes`, which must be the manager's
  // ChangesSince(seen()); nullopt when it tells this stream nothing new.
  // Either way seen() becomes changes.version.
  std::optional<shardd::v1::MembershipUpdate> Next(
      const MembershipChanges& changes);
  // A keepalive: the header last sent, no members.
  shardd::v1::MembershipUpdate Keepalive() const;
  // The scoped version this stream has been told about; -1 before the
  // first message.
  int64_t seen() const { return seen_; }
  // Whether rank `r` is in this stream's scope (W = world, F = factor).
  bool InScope(int r, int factor) const;

 private:
  const int rank_;
  int64_t seen_ = -1;
  // The last message's header (no members) and what decides whether a
  // header is news: epoch, readiness, job state and the plan.
  shardd::v1::MembershipUpdate header_;
  std::string header_key_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_SCOPED_UPDATE_STREAM_H_
