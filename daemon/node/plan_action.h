#ifndef SHARDD_DAEMON_NODE_PLAN_ACTION_H_
#define SHARDD_DAEMON_NODE_PLAN_ACTION_H_

#include <cstdint>
#include <optional>

#include "shardd/v1/common.pb.h"

namespace shardd::node {

// What the coordinator's plan for an epoch asks of one member.
struct PlanAction {
  // The plan is for this epoch and covers every slot (NEW, RESUME or
  // ROLLBACK): the member acts on it and reports READY. Otherwise it waits.
  bool issued = false;
  // ROLLBACK: every rank goes back to `step`; `restore` when this member
  // restores its checkpoint of it (false: it holds the step already, and
  // drops a later in-doubt step).
  bool rollback = false;
  bool restore = false;
  int64_t step = 0;
  // RESUME: the copy this member makes before READY, if any.
  std::optional<v1::ShardTransfer> copy;
};

// Reads `plan` (a MembershipUpdate's) for `rank` in `epoch`. Pure.
PlanAction PlanActionFor(const v1::RecoveryPlan& plan, int64_t epoch, int rank);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_PLAN_ACTION_H_
