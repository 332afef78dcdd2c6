#include "daemon/coordinator/epoch_plan.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// W = 4, F = 2 (HYBRID_SHARD): shard 0 on ranks 0 and 2, shard 1 on 1 and 3.
PlanInput Hybrid(int64_t committed = 5) {
  PlanInput in;
  in.world_size = 4;
  in.sharding_factor = 2;
  in.committed_step = committed;
  for (int r = 0; r < 4; ++r) {
    PlanSlot s;
    s.rank = r;
    s.live = true;
    s.reported = true;
    s.holds_shard = true;
    s.step = committed;
    in.slots.push_back(s);
  }
  return in;
}

// The slot's member is a replacement without a shard.
void Fresh(PlanInput& in, int rank) {
  in.slots[rank].holds_shard = false;
  in.slots[rank].step = 0;
}

void Checkpoints(PlanInput& in, std::vector<int64_t> steps) {
  for (PlanSlot& s : in.slots) {
    s.keeps_checkpoints = true;
    s.checkpoints = steps;
  }
}

TEST(EpochPlanTest, EveryMemberHoldingItsShardResumesWithoutCopies) {
  const EpochPlan p = DecideEpochPlan(Hybrid());
  EXPECT_EQ(p.kind, PlanKind::kResume);
  EXPECT_EQ(p.step, 5);
  EXPECT_THAT(p.copies, IsEmpty());
}

TEST(EpochPlanTest, ReplacementCopiesFromTheLiveReplica) {
  PlanInput in = Hybrid();
  Fresh(in, 1);
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kResume);
  EXPECT_EQ(p.step, 5);
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].target_rank, 1);
  EXPECT_EQ(p.copies[0].shard_index, 1);
  EXPECT_THAT(p.copies[0].source_ranks, ElementsAre(3));
  EXPECT_THAT(p.reason,
              HasSubstr("rank 1 copies shard 1 at step 5 from rank(s) 3"));
}

TEST(EpochPlanTest, ShardlessMemberNeverMakesTheJobNew) {
  // Scenario A of the compound-faults issue: the replacement of rank 1 is
  // the only member of a restarted coordinator so far.
  PlanInput in = Hybrid(/*committed=*/0);
  Fresh(in, 1);
  for (int r : {0, 2, 3}) {
    in.slots[r].live = false;
    in.slots[r].holds_shard = false;
  }
  EpochPlan p = DecideEpochPlan(in);
  EXPECT_EQ(p.kind, PlanKind::kWait);
  // Then the others re-join holding step 5: rank 1 copies, nothing is new.
  in = Hybrid(/*committed=*/5);
  Fresh(in, 1);
  p = DecideEpochPlan(in);
  EXPECT_EQ(p.kind, PlanKind::kResume);
  EXPECT_EQ(p.step, 5);
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_THAT(p.copies[0].source_ranks, ElementsAre(3));
}

TEST(EpochPlanTest, NoHolderAnywhereBeforeTrainingIsANewJob) {
  PlanInput in = Hybrid(/*committed=*/0);
  for (int r = 0; r < 4; ++r) Fresh(in, r);
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kNew);
  in.slots[3].live = false;
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kWait);
}

TEST(EpochPlanTest, TwoReplacementsInDifferentGroupsBothCopy) {
  PlanInput in = Hybrid();
  Fresh(in, 0);
  Fresh(in, 1);
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kResume);
  ASSERT_EQ(p.copies.size(), 2u);
  EXPECT_EQ(p.copies[0].target_rank, 0);
  EXPECT_THAT(p.copies[0].source_ranks, ElementsAre(2));
  EXPECT_EQ(p.copies[1].target_rank, 1);
  EXPECT_THAT(p.copies[1].source_ranks, ElementsAre(3));
}

TEST(EpochPlanTest, EveryReplicaLostWithoutCheckpointsFails) {
  // Scenario B: both holders of shard 0 replaced.
  PlanInput in = Hybrid();
  Fresh(in, 0);
  Fresh(in, 2);
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kFailed);
  EXPECT_EQ(p.lost_shard, 0);
  EXPECT_EQ(p.lost_step, 5);
  EXPECT_THAT(p.reason, HasSubstr("shard 0 at step 5 is lost"));
  EXPECT_THAT(p.reason, HasSubstr("no --checkpoint_dir"));
  EXPECT_THAT(p.reason, HasSubstr("cannot continue"));
}

TEST(EpochPlanTest, LostHoldersAreNamedWhileTheirSlotsAreEmpty) {
  PlanInput in = Hybrid();
  in.slots[0].live = false;  // Removed; the record keeps what it held.
  in.slots[2].live = false;
  in.settled = true;
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kFailed);
  EXPECT_THAT(p.lost_holders, ElementsAre(0, 2));
  EXPECT_THAT(p.reason, HasSubstr("it was held by ranks 0, 2"));
}

TEST(EpochPlanTest, LostShardWaitsUntilSettled) {
  PlanInput in = Hybrid();
  in.slots[0].live = false;
  in.slots[2].live = false;
  in.settled = false;  // A hung holder may still come back.
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kWait);
}

TEST(EpochPlanTest, LostShardRollsBackToTheNewestCommonCheckpoint) {
  PlanInput in = Hybrid(/*committed=*/7);
  Checkpoints(in, {3, 6});
  Fresh(in, 0);
  Fresh(in, 2);
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback);
  EXPECT_EQ(p.step, 6);
  EXPECT_THAT(p.restores, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(p.reason, HasSubstr("steps 7..7 are redone"));
}

TEST(EpochPlanTest, LossRightAfterACheckpointRestoresOnlyTheReplacements) {
  // Lost at step 6, the checkpoint step: the survivors hold step 6 already.
  PlanInput in = Hybrid(/*committed=*/6);
  Checkpoints(in, {3, 6});
  Fresh(in, 0);
  Fresh(in, 2);
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback);
  EXPECT_EQ(p.step, 6);
  EXPECT_THAT(p.restores, ElementsAre(0, 2));
  EXPECT_THAT(p.reason, HasSubstr("no step to redo: ranks at it keep their "
                                  "state"));
}

TEST(EpochPlanTest, CheckpointMissingOnOneRankFallsBackToAnOlderCommonOne) {
  PlanInput in = Hybrid(/*committed=*/7);
  Checkpoints(in, {3, 6});
  Fresh(in, 0);
  Fresh(in, 2);
  in.slots[2].checkpoints = {3};  // Step 6's file was corrupt.
  in.slots[2].checkpoint_problem = "step-6.shardckpt: crc32c mismatch";
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback);
  EXPECT_EQ(p.step, 3);
}

TEST(EpochPlanTest, CheckpointOnNoCommonStepFailsNamingEachRank) {
  PlanInput in = Hybrid(/*committed=*/7);
  Checkpoints(in, {6});
  Fresh(in, 0);
  Fresh(in, 2);
  in.slots[2].checkpoints = {};
  in.slots[2].checkpoint_problem = "step-6.shardckpt: crc32c mismatch";
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kFailed);
  EXPECT_THAT(p.reason, HasSubstr("rank 2 holds no verified checkpoint "
                                  "(step-6.shardckpt: crc32c mismatch)"));
  EXPECT_THAT(p.reason, HasSubstr("rank 1 holds step(s) 6"));
}

TEST(EpochPlanTest, LostShardWithCheckpointsWaitsForItsReplacements) {
  PlanInput in = Hybrid(/*committed=*/7);
  Checkpoints(in, {3, 6});
  in.slots[0].live = false;
  in.slots[2].live = false;
  in.settled = true;
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kWait);
}

TEST(EpochPlanTest, SettledLossWithoutAnyCheckpointFailsBeforeReplacements) {
  PlanInput in = Hybrid();
  in.slots[0].live = false;
  in.slots[2].live = false;
  in.settled = true;
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kFailed);
}

TEST(EpochPlanTest, InDoubtStepTheClusterCommittedNeedsNoCopy) {
  PlanInput in = Hybrid(/*committed=*/6);
  in.slots[1].step = 5;
  in.slots[1].pending_step = 6;
  in.slots[3].step = 6;
  in.slots[0].step = 6;
  in.slots[2].step = 6;
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kResume);
  EXPECT_EQ(p.step, 6);
  EXPECT_THAT(p.copies, IsEmpty());
}

TEST(EpochPlanTest, HolderBehindWithoutAPendingStepCopies) {
  PlanInput in = Hybrid(/*committed=*/6);
  for (PlanSlot& s : in.slots) s.step = 6;
  in.slots[1].step = 4;
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kResume);
  ASSERT_EQ(p.copies.size(), 1u);
  EXPECT_EQ(p.copies[0].target_rank, 1);
}

TEST(EpochPlanTest, NothingCommittedLosesNothing) {
  // Both holders of shard 0 died before the first step: registering the
  // model again recreates step 0.
  PlanInput in = Hybrid(/*committed=*/0);
  Fresh(in, 0);
  Fresh(in, 2);
  const EpochPlan p = DecideEpochPlan(in);
  EXPECT_EQ(p.kind, PlanKind::kResume);
  EXPECT_EQ(p.step, 0);
}

// A resumed job: every rank imported step 6 when registering, nothing was
// trained since. Ranks 0 and 2 (both replicas of shard 0) have not
// installed it yet (a slow import) or were replaced: registering makes it
// again, nothing is lost.
PlanInput ResumedAt6WithShard0Unregistered() {
  PlanInput in = Hybrid(/*committed=*/6);
  for (PlanSlot& s : in.slots) s.registration_state = true;
  for (int r : {0, 2}) {
    in.slots[r].registration_state = false;
    in.slots[r].step = 0;  // READY without a shard (or fresh).
  }
  Fresh(in, 2);
  return in;
}

TEST(EpochPlanTest, AShardNobodyHoldsAtARegisteredStepIsMadeAgain) {
  const EpochPlan p = DecideEpochPlan(ResumedAt6WithShard0Unregistered());
  ASSERT_EQ(p.kind, PlanKind::kResume);
  EXPECT_EQ(p.step, 6);
  EXPECT_THAT(p.remade_shards, ElementsAre(0));
  EXPECT_THAT(p.copies, IsEmpty());
  EXPECT_THAT(p.reason,
              HasSubstr("shard 0 made again by registering the model"));
}

TEST(EpochPlanTest, AHolderThatTrainedSinceMakesTheShardLost) {
  PlanInput in = ResumedAt6WithShard0Unregistered();
  in.slots[3].registration_state = false;  // Rank 3 committed a step since.
  const EpochPlan p = DecideEpochPlan(in);
  EXPECT_EQ(p.kind, PlanKind::kFailed);
  EXPECT_THAT(p.remade_shards, IsEmpty());
  EXPECT_THAT(p.reason, HasSubstr("shard 0 at step 6 is lost"));
}

TEST(EpochPlanTest, AStepCommittedBeyondTheRegisteredOneMakesTheShardLost) {
  // The coordinator decided step 7 (its vote) though the holders report 6.
  PlanInput in = ResumedAt6WithShard0Unregistered();
  in.committed_step = 7;
  const EpochPlan p = DecideEpochPlan(in);
  EXPECT_NE(p.kind, PlanKind::kResume);
  EXPECT_THAT(p.remade_shards, IsEmpty());
}

TEST(EpochPlanTest, CheckpointsOnDiskAreNeverTakenForANewJob) {
  // Every daemon and the coordinator restarted: nobody holds a shard, but
  // every rank's folder holds step 2. The job resumes there; it does not
  // start again at step 0 and overwrite the checkpoints.
  PlanInput in = Hybrid(/*committed=*/0);
  for (int r = 0; r < 4; ++r) Fresh(in, r);
  Checkpoints(in, {2});
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback) << p.reason;
  EXPECT_EQ(p.step, 2);
  EXPECT_THAT(p.restores, ElementsAre(0, 1, 2, 3));
}

TEST(EpochPlanTest, CommittedInDoubtStepCountsAsHeldForARollback) {
  // Step 2 committed while rank 0 was in doubt (at 1, holding 2 prepared,
  // no checkpoint of 2 written); then both holders of shard 1 died.
  PlanInput in = Hybrid(/*committed=*/2);
  Checkpoints(in, {2});
  Fresh(in, 1);
  Fresh(in, 3);
  in.slots[0].step = 1;
  in.slots[0].pending_step = 2;
  in.slots[0].checkpoints = {};
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback) << p.reason;
  EXPECT_EQ(p.step, 2);
  // Ranks 0 (applies its in-doubt step) and 2 are there already.
  EXPECT_THAT(p.restores, ElementsAre(1, 3));
}

TEST(EpochPlanTest, InDoubtHolderMayStayAtItsStepForARollback) {
  // Rank 1 holds step 3 with step 4 in doubt and keeps no checkpoint; step
  // 4 committed (rank 3 holds it) but shard 0 is lost at 4. Everyone else
  // holds checkpoint 3: rank 1 stays at 3 (dropping its in-doubt step).
  PlanInput in = Hybrid(/*committed=*/4);
  Checkpoints(in, {3});
  Fresh(in, 0);
  Fresh(in, 2);
  in.slots[1].step = 3;
  in.slots[1].pending_step = 4;
  in.slots[1].checkpoints = {};
  in.slots[3].step = 4;
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback) << p.reason;
  EXPECT_EQ(p.step, 3);
  EXPECT_THAT(p.restores, ElementsAre(0, 2, 3));
}

TEST(EpochPlanTest, CheckpointProvesItsStepToARestartedCoordinator) {
  // The coordinator restarted and forgot that step 6 committed: the only
  // holder left holds 5 with 6 in doubt, but the other ranks' checkpoints
  // of step 6 prove it; the holder applies it, everyone else restores 6.
  PlanInput in = Hybrid(/*committed=*/5);
  Checkpoints(in, {3, 6});
  for (int r : {0, 2, 3}) Fresh(in, r);
  in.slots[1].step = 5;
  in.slots[1].pending_step = 6;
  in.slots[1].checkpoints = {3};
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback) << p.reason;
  EXPECT_EQ(p.step, 6);
  EXPECT_THAT(p.restores, ElementsAre(0, 2, 3));
}

TEST(EpochPlanTest, NoLiveMemberDecidesNothing) {
  PlanInput in = Hybrid(/*committed=*/5);
  Checkpoints(in, {3});
  for (PlanSlot& s : in.slots) s.live = false;
  in.settled = true;
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kWait);
  // Nor without checkpoints: whoever comes back brings the facts.
  for (PlanSlot& s : in.slots) s.checkpoints.clear();
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kWait);
}

TEST(EpochPlanTest, GoneMembersLastReportsKeepTheWaitOpen) {
  // The survivors hold step 6's checkpoint; the gone holders of shard 0
  // last reported holding only step 3: no common step, the job fails.
  PlanInput in = Hybrid(/*committed=*/7);
  Checkpoints(in, {6});
  in.slots[0].live = false;
  in.slots[2].live = false;
  in.slots[0].checkpoints = {3};
  in.slots[2].checkpoints = {3};
  in.settled = true;
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kFailed);
  // With step 6 in their last reports, their replacements are waited for.
  in.slots[0].checkpoints = {3, 6};
  in.slots[2].checkpoints = {3, 6};
  EXPECT_EQ(DecideEpochPlan(in).kind, PlanKind::kWait);
}

TEST(EpochPlanTest, FullShardingLossWithoutReplicaRollsBack) {
  // W/F = 1: every loss is a rollback (tests/faults:checkpoint_test).
  PlanInput in;
  in.world_size = 4;
  in.sharding_factor = 4;
  in.committed_step = 7;
  for (int r = 0; r < 4; ++r) {
    PlanSlot s{r, true, true, 7, false, true, 0, true, {3, 6}, ""};
    in.slots.push_back(s);
  }
  Fresh(in, 1);
  const EpochPlan p = DecideEpochPlan(in);
  ASSERT_EQ(p.kind, PlanKind::kRollback);
  EXPECT_EQ(p.step, 6);
}

}  // namespace
}  // namespace shardd::coordinator
