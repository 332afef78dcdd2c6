#include "daemon/coordinator/common_checkpoint.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

SlotRecord Member(int rank, std::vector<int64_t> steps, bool keeps = true) {
  SlotRecord slot;
  slot.rank = rank;
  slot.phase = MemberPhase::kReady;
  slot.checkpoints.keeps = keeps;
  slot.checkpoints.steps = std::move(steps);
  return slot;
}

TEST(NewestCommonCheckpointTest, IsTheNewestStepEveryMemberHolds) {
  EXPECT_EQ(NewestCommonCheckpoint(
                {Member(0, {3, 6, 9}), Member(1, {3, 6}), Member(2, {6, 9})}),
            6);
}

TEST(NewestCommonCheckpointTest, ASlowerRanksOnlyStepIsTheCommonOne) {
  // Rank 1 skipped 6 and 9 behind a slow disk: 3 is what a rollback needs.
  EXPECT_EQ(NewestCommonCheckpoint({Member(0, {3, 6, 9}), Member(1, {3})}), 3);
}

TEST(NewestCommonCheckpointTest, NoneWhenNoStepIsHeldByAll) {
  EXPECT_EQ(NewestCommonCheckpoint({Member(0, {6, 9}), Member(1, {3})}), -1);
  EXPECT_EQ(NewestCommonCheckpoint({Member(0, {6, 9}), Member(1, {})}), -1);
}

TEST(NewestCommonCheckpointTest, UnknownWhileASlotHasNoLiveMember) {
  std::vector<SlotRecord> slots = {Member(0, {3}), Member(1, {3})};
  slots[1].phase = MemberPhase::kFailed;
  EXPECT_EQ(NewestCommonCheckpoint(slots), -1);
  slots[1].phase = MemberPhase::kEmpty;
  EXPECT_EQ(NewestCommonCheckpoint(slots), -1);
  EXPECT_EQ(NewestCommonCheckpoint({}), -1);
}

TEST(NewestCommonCheckpointTest, UnknownWhenAMemberKeepsNoCheckpoints) {
  EXPECT_EQ(NewestCommonCheckpoint({Member(0, {3}), Member(1, {3}, false)}),
            -1);
}

}  // namespace
}  // namespace shardd::coordinator
