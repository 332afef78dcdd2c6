#include "daemon/node/plan_action.h"

#include <algorithm>

namespace shardd::node {

PlanAction PlanActionFor(const v1::RecoveryPlan& plan, int64_t epoch,
                         int rank) {
  PlanAction action;
  action.issued =
      plan.epoch() == epoch && (plan.kind() == v1::EPOCH_PLAN_KIND_NEW ||
                                plan.kind() == v1::EPOCH_PLAN_KIND_RESUME ||
                                plan.kind() == v1::EPOCH_PLAN_KIND_ROLLBACK);
  if (!action.issued) return action;
  action.step = plan.step();
  action.rollback = plan.kind() == v1::EPOCH_PLAN_KIND_ROLLBACK;
  action.restore =
      action.rollback &&
      std::find(plan.restore_ranks().begin(), plan.restore_ranks().end(),
                rank) != plan.restore_ranks().end();
  for (const v1::ShardTransfer& t : plan.transfers()) {
    if (t.target_rank() == rank) action.copy = t;
  }
  return action;
}

}  // namespace shardd::node
