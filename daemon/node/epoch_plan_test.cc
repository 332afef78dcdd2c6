#include "daemon/node/epoch_plan.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

using Kind = EpochAction::Kind;
using Outcome = EpochPlan::Outcome;

constexpr int kRank = 1;
constexpr char kMe[] = "me";

// A view of `epoch` with W = 4, F = 2 and `live` members, rank 1 held by
// `holder`.
coordinator::MembershipView View(int64_t epoch, int live = 4,
                                 const std::string& holder = kMe) {
  coordinator::MembershipView view;
  view.epoch = epoch;
  view.world_size = 4;
  view.sharding_factor = 2;
  view.reason = "member 3 joined";
  for (int r = 0; r < live; ++r) {
    v1::MemberInfo m;
    m.set_rank(r);
    m.set_incarnation(r == kRank ? holder : absl::StrCat("other-", r));
    view.members.push_back(m);
  }
  return view;
}

void Issue(coordinator::MembershipView& view, v1::EpochPlanKind kind,
           int64_t step) {
  view.plan.set_epoch(view.epoch);
  view.plan.set_kind(kind);
  view.plan.set_step(step);
}

std::string Names(const EpochPlan& plan) {
  std::vector<std::string> names;
  for (const EpochAction& a : plan.actions) {
    names.emplace_back(EpochActionName(a.kind));
  }
  return absl::StrJoin(names, ",");
}

const EpochAction* Find(const EpochPlan& plan, Kind kind) {
  for (const EpochAction& a : plan.actions) {
    if (a.kind == kind) return &a;
  }
  return nullptr;
}

class EpochPlanTest : public ::testing::Test {};

TEST_F(EpochPlanTest, NewJobBuildsCommunicatorsAndReportsReady) {
  coordinator::MembershipView view = View(1);
  Issue(view, v1::EPOCH_PLAN_KIND_NEW, 0);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, {}, {});
  EXPECT_EQ(plan.outcome, Outcome::kAct);
  EXPECT_EQ(Names(plan),
            "note_epoch_changed,supersede_communicators,adopt_topology,"
            "settle_in_doubt_step,build_communicators,report_ready");
  EXPECT_EQ(plan.next, (EpochCursor{1, 1}));
  EXPECT_FALSE(Find(plan, Kind::kSettleInDoubtStep)->rollback);
  EXPECT_FALSE(Find(plan, Kind::kBuildCommunicators)->prepare_copy);
  EXPECT_EQ(Find(plan, Kind::kSupersedeCommunicators)->why,
            "epoch 0 superseded by 1: member 3 joined");
}

TEST_F(EpochPlanTest, NotEveryoneLiveAbortsTheOldEpochAndWaits) {
  const coordinator::MembershipView view = View(5, /*live=*/3);
  const EpochPlan plan =
      PlanEpoch(view, kRank, kMe, EpochCursor{4, 4}, {.comm_epoch = 4});
  EXPECT_EQ(plan.outcome, Outcome::kWaitForMembers);
  EXPECT_EQ(Names(plan), "note_epoch_changed,supersede_communicators");
  // Seen but not handled: the same epoch is handled once everyone is live.
  EXPECT_EQ(plan.next, (EpochCursor{4, 5}));
  EXPECT_FALSE(WantsView(view, plan.next));
  coordinator::MembershipView all = View(5);
  Issue(all, v1::EPOCH_PLAN_KIND_RESUME, 7);
  ASSERT_TRUE(WantsView(all, plan.next));
  const EpochPlan then =
      PlanEpoch(all, kRank, kMe, plan.next, {.comm_epoch = 4});
  EXPECT_EQ(then.outcome, Outcome::kAct);
  // The change was noted already: not again.
  EXPECT_EQ(Names(then),
            "adopt_topology,settle_in_doubt_step,build_communicators,"
            "report_ready");
}

TEST_F(EpochPlanTest, AViewAlreadyHandledChangesNothing) {
  coordinator::MembershipView view = View(3);
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 2);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, EpochCursor{3, 3}, {});
  EXPECT_EQ(plan.outcome, Outcome::kNothingNew);
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_EQ(plan.next, (EpochCursor{3, 3}));
}

TEST_F(EpochPlanTest, RemovedMemberOnlyAbortsAndNeverBuilds) {
  // Rank 1 is held by a successor (this process was replaced while it
  // hung, or cut off): it must not publish itself in the rendezvous.
  coordinator::MembershipView view = View(6, 4, "successor");
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 9);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, EpochCursor{5, 5},
                                   {.comm_epoch = 5, .holds_engine = true});
  EXPECT_EQ(plan.outcome, Outcome::kNotHeldHere);
  EXPECT_EQ(Names(plan), "note_epoch_changed,supersede_communicators");
  EXPECT_EQ(plan.next, (EpochCursor{6, 6}));
}

TEST_F(EpochPlanTest, NoPlanYetAdoptsTheTopologyAndWaits) {
  coordinator::MembershipView view = View(2);
  view.plan.set_epoch(2);
  view.plan.set_kind(v1::EPOCH_PLAN_KIND_WAIT);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, EpochCursor{1, 1}, {});
  EXPECT_EQ(plan.outcome, Outcome::kWaitForPlan);
  EXPECT_EQ(Names(plan),
            "note_epoch_changed,supersede_communicators,adopt_topology");
  // A plan of an older epoch is not this one's either.
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 3);
  view.plan.set_epoch(1);
  EXPECT_EQ(PlanEpoch(view, kRank, kMe, EpochCursor{1, 1}, {}).outcome,
            Outcome::kWaitForPlan);
}

TEST_F(EpochPlanTest, ReattachHoldingItsShardBuildsWithoutCopy) {
  coordinator::MembershipView view = View(4);
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 12);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, EpochCursor{3, 3},
                                   {.comm_epoch = 3, .holds_engine = true});
  EXPECT_EQ(plan.outcome, Outcome::kAct);
  EXPECT_EQ(Names(plan),
            "note_epoch_changed,supersede_communicators,adopt_topology,"
            "settle_in_doubt_step,build_communicators,report_ready");
  EXPECT_FALSE(plan.copy.has_value());
  EXPECT_FALSE(plan.copy_refused_holds_engine);
}

TEST_F(EpochPlanTest, ReplacementCopiesFromAReplicaAndPreparesItsEngine) {
  coordinator::MembershipView view = View(8);
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 30);
  v1::ShardTransfer* t = view.plan.add_transfers();
  t->set_target_rank(kRank);
  t->add_source_ranks(3);
  v1::ShardTransfer* other = view.plan.add_transfers();
  other->set_target_rank(2);
  other->add_source_ranks(0);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, EpochCursor{7, 7}, {});
  EXPECT_EQ(plan.outcome, Outcome::kAct);
  EXPECT_EQ(Names(plan),
            "note_epoch_changed,supersede_communicators,adopt_topology,"
            "settle_in_doubt_step,build_communicators,copy_shard,"
            "report_ready");
  ASSERT_TRUE(plan.copy.has_value());
  EXPECT_EQ(plan.copy->target_rank(), kRank);
  EXPECT_EQ(plan.copy->source_ranks(0), 3);
  EXPECT_TRUE(Find(plan, Kind::kBuildCommunicators)->prepare_copy);
  // An engine prepared in an earlier attempt is not built again.
  const EpochPlan again =
      PlanEpoch(view, kRank, kMe, EpochCursor{7, 7}, {.engine_prepared = true});
  EXPECT_FALSE(Find(again, Kind::kBuildCommunicators)->prepare_copy);
  EXPECT_NE(Find(again, Kind::kCopyShard), nullptr);
  // Without sources there is nothing to learn the model from ahead.
  view.plan.mutable_transfers(0)->clear_source_ranks();
  EXPECT_FALSE(Find(PlanEpoch(view, kRank, kMe, EpochCursor{7, 7}, {}),
                    Kind::kBuildCommunicators)
                   ->prepare_copy);
}

TEST_F(EpochPlanTest, CopyPlannedForAMemberHoldingAnEngineIsRefused) {
  coordinator::MembershipView view = View(8);
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 30);
  v1::ShardTransfer* t = view.plan.add_transfers();
  t->set_target_rank(kRank);
  t->add_source_ranks(3);
  const EpochPlan plan =
      PlanEpoch(view, kRank, kMe, EpochCursor{7, 7}, {.holds_engine = true});
  EXPECT_TRUE(plan.copy_refused_holds_engine);
  EXPECT_EQ(Find(plan, Kind::kCopyShard), nullptr);
  EXPECT_NE(Find(plan, Kind::kReportReady), nullptr);
}

TEST_F(EpochPlanTest, CheckpointRestoreComesBeforeTheCommunicators) {
  coordinator::MembershipView view = View(11);
  Issue(view, v1::EPOCH_PLAN_KIND_ROLLBACK, 40);
  view.plan.add_restore_ranks(0);
  view.plan.add_restore_ranks(kRank);
  const EpochPlan plan = PlanEpoch(view, kRank, kMe, EpochCursor{10, 10}, {});
  EXPECT_EQ(plan.outcome, Outcome::kAct);
  EXPECT_EQ(Names(plan),
            "note_epoch_changed,supersede_communicators,adopt_topology,"
            "settle_in_doubt_step,abandon_checkpoints_above,"
            "restore_checkpoint,build_communicators,report_ready");
  EXPECT_TRUE(Find(plan, Kind::kSettleInDoubtStep)->rollback);
  EXPECT_EQ(Find(plan, Kind::kSettleInDoubtStep)->step, 40);
  EXPECT_EQ(Find(plan, Kind::kAbandonCheckpointsAbove)->step, 40);
  EXPECT_EQ(Find(plan, Kind::kRestoreCheckpoint)->step, 40);
}

TEST_F(EpochPlanTest, RollbackToAStepHeldDropsTheInDoubtStepWithoutRestore) {
  coordinator::MembershipView view = View(11);
  Issue(view, v1::EPOCH_PLAN_KIND_ROLLBACK, 40);
  view.plan.add_restore_ranks(0);  // Not this rank: it holds step 40.
  const EpochPlan plan =
      PlanEpoch(view, kRank, kMe, EpochCursor{10, 10}, {.holds_engine = true});
  EXPECT_EQ(Names(plan),
            "note_epoch_changed,supersede_communicators,adopt_topology,"
            "settle_in_doubt_step,abandon_checkpoints_above,"
            "build_communicators,report_ready");
  const EpochAction* settle = Find(plan, Kind::kSettleInDoubtStep);
  EXPECT_TRUE(settle->rollback);
  EXPECT_EQ(settle->step, 40);
}

TEST_F(EpochPlanTest, CommunicatorsOfTheEpochAlreadyAreNotSuperseded) {
  coordinator::MembershipView view = View(5);
  Issue(view, v1::EPOCH_PLAN_KIND_RESUME, 1);
  const EpochPlan plan =
      PlanEpoch(view, kRank, kMe, EpochCursor{4, 4}, {.comm_epoch = 5});
  EXPECT_EQ(Find(plan, Kind::kSupersedeCommunicators), nullptr);
  EXPECT_NE(Find(plan, Kind::kNoteEpochChanged), nullptr);
}

}  // namespace
}  // namespace shardd::node
