#include "daemon/node/plan_action.h"

#include "gtest/gtest.h"

namespace shardd::node {
namespace {

v1::RecoveryPlan Plan(v1::EpochPlanKind kind, int64_t epoch, int64_t step) {
  v1::RecoveryPlan plan;
  plan.set_kind(kind);
  plan.set_epoch(epoch);
  plan.set_step(step);
  return plan;
}

TEST(PlanActionTest, WaitsForAPlanOfThisEpochThatCoversEverySlot) {
  EXPECT_FALSE(
      PlanActionFor(Plan(v1::EPOCH_PLAN_KIND_WAIT, 4, 0), 4, 0).issued);
  EXPECT_FALSE(
      PlanActionFor(Plan(v1::EPOCH_PLAN_KIND_FAILED, 4, 0), 4, 0).issued);
  // An older epoch's plan is not this epoch's.
  EXPECT_FALSE(
      PlanActionFor(Plan(v1::EPOCH_PLAN_KIND_RESUME, 3, 7), 4, 0).issued);
  const PlanAction fresh =
      PlanActionFor(Plan(v1::EPOCH_PLAN_KIND_NEW, 4, 0), 4, 0);
  EXPECT_TRUE(fresh.issued);
  EXPECT_FALSE(fresh.rollback);
  EXPECT_FALSE(fresh.copy.has_value());
}

TEST(PlanActionTest, OnlyTheTargetCopies) {
  v1::RecoveryPlan plan = Plan(v1::EPOCH_PLAN_KIND_RESUME, 9, 6);
  v1::ShardTransfer* t = plan.add_transfers();
  t->set_target_rank(1);
  t->set_shard_index(1);
  t->add_source_ranks(3);
  const PlanAction target = PlanActionFor(plan, 9, 1);
  ASSERT_TRUE(target.copy.has_value());
  EXPECT_EQ(target.copy->source_ranks(0), 3);
  EXPECT_EQ(target.step, 6);
  EXPECT_FALSE(PlanActionFor(plan, 9, 3).copy.has_value());
}

TEST(PlanActionTest, RollbackRestoresOnlyTheListedRanks) {
  v1::RecoveryPlan plan = Plan(v1::EPOCH_PLAN_KIND_ROLLBACK, 5, 3);
  plan.add_restore_ranks(0);
  plan.add_restore_ranks(2);
  const PlanAction listed = PlanActionFor(plan, 5, 2);
  EXPECT_TRUE(listed.rollback);
  EXPECT_TRUE(listed.restore);
  EXPECT_EQ(listed.step, 3);
  const PlanAction there = PlanActionFor(plan, 5, 1);
  EXPECT_TRUE(there.rollback);
  EXPECT_FALSE(there.restore);
}

}  // namespace
}  // namespace shardd::node
