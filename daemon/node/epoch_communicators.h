#ifndef SHARDD_DAEMON_NODE_EPOCH_COMMUNICATORS_H_
#define SHARDD_DAEMON_NODE_EPOCH_COMMUNICATORS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "daemon/comm/collective.h"

namespace shardd::node {

// The node's communicators of one epoch (its shard group and replica
// group) and their health, with the life cycle NCCL gives a communicator:
// installed for one epoch, then failed or superseded, when they are aborted
// (idempotent, never waits on peers) and never mended in place: the next
// epoch installs new ones. A failure keeps its first reason, which the
// trainer hears ("the daemon is not in a ready epoch (...)").
//
// Thread-compatible: the owner (NodeManager) guards it with its mutex. It
// shares the collectives with the StepEngine that runs on them.
class EpochCommunicators {
 public:
  // 0 until the first epoch's are installed.
  int64_t epoch() const { return epoch_; }
  bool failed() const { return failed_; }
  const std::string& error() const { return error_; }
  const std::shared_ptr<comm::Collective>& shard_group() const {
    return shard_group_;
  }
  const std::shared_ptr<comm::Collective>& replica_group() const {
    return replica_group_;
  }
  // Installed and not failed.
  bool healthy() const { return epoch_ > 0 && !failed_; }

  // `epoch`'s newly built groups: healthy. The previous ones are dropped
  // (they were aborted when their epoch was superseded).
  void Install(int64_t epoch, std::shared_ptr<comm::Collective> shard_group,
               std::shared_ptr<comm::Collective> replica_group);
  // A newer epoch began: communicators of an older one are failed with
  // `why` and aborted, so that a collective blocked on a hung peer returns
  // now. False (nothing done) when they are `epoch`'s or newer.
  bool Supersede(int64_t epoch, absl::string_view why);
  // A collective of `epoch` failed: the same, unless `epoch` is no longer
  // theirs (already replaced: false, nothing done).
  bool Abandon(int64_t epoch, absl::string_view why);
  // Failed with `why` (replacing an earlier reason), not aborted: the
  // epoch could not be formed, or the engine's state is garbage until a
  // restore succeeds.
  void MarkFailed(absl::string_view why);
  // Aborts both groups (shutdown, the job's end); their health is kept.
  void AbortAll(absl::string_view why);
  // The replica group when it is `epoch`'s and healthy (its own async
  // error included); null otherwise.
  std::shared_ptr<comm::Collective> ReplicaGroupOf(int64_t epoch) const;
  // Drops the groups (the owner's destruction).
  void Clear();

 private:
  void FailFirst(absl::string_view why);

  int64_t epoch_ = 0;
  bool failed_ = false;
  std::string error_;
  std::shared_ptr<comm::Collective> shard_group_;
  std::shared_ptr<comm::Collective> replica_group_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EPOCH_COMMUNICATORS_H_
