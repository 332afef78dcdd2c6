#ifndef SHARDD_DAEMON_NODE_EPOCH_PLAN_H_
#define SHARDD_DAEMON_NODE_EPOCH_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/coordinator/membership_view.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {

// What the epoch driver remembers between membership views.
struct EpochCursor {
  // The newest epoch acted on, or passed over because another process
  // holds this member's slot in it.
  int64_t handled = 0;
  // The newest epoch whose change was noted (its predecessor's
  // communicators aborted).
  int64_t seen = 0;

  friend bool operator==(const EpochCursor& a, const EpochCursor& b) {
    return a.handled == b.handled && a.seen == b.seen;
  }
};

// What the node holds that an epoch's plan depends on.
struct LocalEpochState {
  // The epoch of the node's communicators (0: none yet).
  int64_t comm_epoch = 0;
  // A model is registered (the node holds a shard).
  bool holds_engine = false;
  // A replacement's engine was already built for a copy (PrepareEngine).
  bool engine_prepared = false;
};

// One thing the node does for an epoch. The driver performs a plan's
// actions in order and stops at the first that fails.
struct EpochAction {
  enum class Kind {
    // Tell trainers the epoch changed (from LocalEpochState::comm_epoch).
    kNoteEpochChanged,
    // Abort the older epoch's communicators (a member left, died or hung):
    // a collective blocked on a hung peer returns now. `why` says so.
    kSupersedeCommunicators,
    // The epoch's world size and sharding factor become the node's.
    kAdoptTopology,
    // A step left in doubt becomes applied or dropped, before anything
    // else of the epoch. With `rollback`, a node that holds `step` drops
    // the later in-doubt step instead (the plan counted on it).
    kSettleInDoubtStep,
    // Rollback: checkpoints above `step` no longer count.
    kAbandonCheckpointsAbove,
    // Rollback: this node restores its checkpoint of `step`, creating its
    // engine from it when it has none.
    kRestoreCheckpoint,
    // Build the epoch's shard and replica groups; with `prepare_copy`, a
    // replacement builds its engine for the copy meanwhile.
    kBuildCommunicators,
    // A replacement copies its shard from a replica (`copy`).
    kCopyShard,
    // READY at the node's committed step.
    kReportReady,
  };
  explicit EpochAction(Kind k) : kind(k) {}

  Kind kind;
  int64_t step = 0;
  bool rollback = false;
  bool prepare_copy = false;
  std::string why;
};

// The decision for one membership view.
struct EpochPlan {
  enum class Outcome {
    // Nothing new in this view (the cursor is past it).
    kNothingNew,
    // Not every slot is held yet: wait for members.
    kWaitForMembers,
    // Another process holds this member's slot in the epoch (this one was
    // removed, or replaced while it hung): it must not take part.
    kNotHeldHere,
    // The coordinator has no plan for every slot yet: wait for it.
    kWaitForPlan,
    // The actions below make the node READY in the epoch.
    kAct,
  };
  Outcome outcome = Outcome::kNothingNew;
  EpochCursor next;
  std::vector<EpochAction> actions;
  // The copy kCopyShard makes (and kBuildCommunicators prepares for).
  std::optional<v1::ShardTransfer> copy;
  // The plan names a copy for this member although it holds an engine: it
  // reports its real step with READY and the coordinator plans again.
  bool copy_refused_holds_engine = false;
};

// True when the driver has something to do with `view`: a newer epoch than
// it handled, and either every slot live or an epoch change to note.
bool WantsView(const coordinator::MembershipView& view,
               const EpochCursor& cursor);

// The node's decision for `view`, as member `rank` (process `incarnation`)
// with `local` state, after `cursor`. Pure: the same inputs give the same
// plan, and nothing is done here.
EpochPlan PlanEpoch(const coordinator::MembershipView& view, int rank,
                    absl::string_view incarnation, const EpochCursor& cursor,
                    const LocalEpochState& local);

// A name for logs and test failures ("build_communicators").
absl::string_view EpochActionName(EpochAction::Kind kind);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EPOCH_PLAN_H_
