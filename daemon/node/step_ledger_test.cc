#include "daemon/node/step_ledger.h"

#include "gtest/gtest.h"

namespace shardd::node {
namespace {

class StepLedgerTest : public ::testing::Test {
 protected:
  // Units 0..n-1 reduced, as a step needs.
  void ReduceAll(int n) {
    for (int u = 0; u < n; ++u) ledger_.NoteReduced(u);
  }
  StepLedger ledger_;
};

TEST_F(StepLedgerTest, RefusesAGatherBeyondKButNotOneAlreadyHeld) {
  ledger_.NoteGathered(0);
  ledger_.NoteGathered(3);
  const absl::Status s = ledger_.CheckGather(5, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "max_gathered_units (2) units are gathered and not released: "
            "[0, 3]; release one before gathering unit 5");
  EXPECT_TRUE(ledger_.CheckGather(3, 2).ok());  // Held: gathering again.
  ledger_.NoteReleased(0);
  EXPECT_TRUE(ledger_.CheckGather(5, 2).ok());
}

TEST_F(StepLedgerTest, UnitsReleasedInTheSameCallDoNotCountAgainstK) {
  ledger_.NoteGathered(0);
  ledger_.NoteGathered(3);
  EXPECT_TRUE(ledger_.CheckGather(5, 2, /*releasing=*/{3}).ok());
  EXPECT_TRUE(ledger_.CheckGather(5, 2, /*releasing=*/{0, 3}).ok());
  // Releasing a unit that is not held frees nothing.
  EXPECT_EQ(ledger_.CheckGather(5, 2, /*releasing=*/{4}).code(),
            absl::StatusCode::kResourceExhausted);
  // A held unit released and gathered again in one call is a new gather.
  EXPECT_EQ(ledger_.CheckGather(3, 1, /*releasing=*/{3}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ledger_.CheckGather(3, 2, /*releasing=*/{3}).ok());
}

TEST_F(StepLedgerTest, RejectsAUnitReducedTwiceInAStep) {
  EXPECT_TRUE(ledger_.CheckNotReduced(1, 7).ok());
  ledger_.NoteReduced(1);
  const absl::Status s = ledger_.CheckNotReduced(1, 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "unit 1 was already reduced in step 7");
}

TEST_F(StepLedgerTest, CountsAccumulatedMicroBatchesIntoTheReduction) {
  EXPECT_EQ(ledger_.NoteAccumulated(2), 1);
  EXPECT_EQ(ledger_.NoteAccumulated(2), 2);
  EXPECT_EQ(ledger_.NoteReduced(2), 3);
  EXPECT_EQ(ledger_.NoteReduced(4), 1);  // Nothing accumulated.
  v1::StepResponse committed;
  committed.set_committed_step(1);
  ledger_.NoteCommitted(committed);
  EXPECT_EQ(ledger_.NoteAccumulated(2), 1);  // The count started over.
}

TEST_F(StepLedgerTest, StepNeedsTheNextStepNothingHeldAndEveryUnitReduced) {
  EXPECT_EQ(ledger_.CheckStep(5, 3, 2).message(),
            "step: 5 is neither committed_step + 1 (4) nor committed_step (3)");
  ledger_.NoteReduced(1);
  EXPECT_EQ(ledger_.CheckStep(4, 3, 3).message(),
            "units not reduced in step 4: [0, 2]");
  ledger_.NoteGathered(2);
  EXPECT_EQ(ledger_.CheckStep(4, 3, 3).message(),
            "units still gathered: [2]; release them before Step");
  ledger_.NoteReleased(2);
  ledger_.NoteReduced(0);
  ledger_.NoteReduced(2);
  EXPECT_TRUE(ledger_.CheckStep(4, 3, 3).ok());
  EXPECT_EQ(ledger_.CheckStep(4, 3, 3).code(), absl::StatusCode::kOk);
}

TEST_F(StepLedgerTest, ARetriedCommittedStepGetsItsResponseAgain) {
  EXPECT_FALSE(ledger_.Retried(4, 4).has_value());  // Nothing recorded.
  ReduceAll(2);
  v1::StepResponse committed;
  committed.set_committed_step(4);
  committed.set_grad_norm(0.5);
  ledger_.NoteCommitted(committed);
  const std::optional<v1::StepResponse> again = ledger_.Retried(4, 4);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->already_committed());
  EXPECT_EQ(again->grad_norm(), 0.5);
  EXPECT_FALSE(ledger_.Retried(5, 4).has_value());  // The next step.
  EXPECT_TRUE(ledger_.Idle());                      // Reductions cleared.
  ledger_.ResetForEngine();
  EXPECT_FALSE(ledger_.Retried(4, 4).has_value());  // Another engine's.
}

TEST_F(StepLedgerTest, ANewEpochAbandonsTheStepButKeepsGatheredUnits) {
  ledger_.NoteGathered(0);
  ledger_.NoteReduced(1);
  ledger_.NoteAccumulated(2);
  ledger_.NoteCollectiveIssued();
  EXPECT_TRUE(ledger_.MarkAbortCounted());
  ledger_.ResetForEpoch();
  EXPECT_TRUE(ledger_.IsHeld(0));
  EXPECT_TRUE(ledger_.CheckNotReduced(1, 1).ok());
  EXPECT_EQ(ledger_.NoteAccumulated(2), 1);
  EXPECT_FALSE(ledger_.TakeInStep());
  EXPECT_TRUE(ledger_.MarkAbortCounted());  // A new attempt counts again.
}

TEST_F(StepLedgerTest, AnAttemptBelongsToTheEpochItBeganIn) {
  EXPECT_TRUE(ledger_.EnterAttempt(2).ok());  // Begins in epoch 2.
  EXPECT_TRUE(ledger_.EnterAttempt(2).ok());
  const absl::Status crossed = ledger_.EnterAttempt(3);
  EXPECT_TRUE(absl::IsAborted(crossed)) << crossed;
  EXPECT_NE(crossed.message().find("began in epoch 2 and the daemon is in "
                                   "epoch 3"),
            absl::string_view::npos)
      << crossed;
  EXPECT_TRUE(absl::IsAborted(ledger_.EnterAttempt(3)));  // Until WaitReady.
  ledger_.EndAttempt();
  EXPECT_TRUE(ledger_.EnterAttempt(3).ok());  // A new attempt in epoch 3.
}

TEST_F(StepLedgerTest, ACommitANewEngineOrANewTrainerEndTheAttempt) {
  EXPECT_TRUE(ledger_.EnterAttempt(2).ok());
  ledger_.NoteCommitted(v1::StepResponse());
  EXPECT_TRUE(ledger_.EnterAttempt(3).ok());
  ledger_.ResetForEngine();
  EXPECT_TRUE(ledger_.EnterAttempt(4).ok());
  (void)ledger_.TakeInStep();
  EXPECT_TRUE(ledger_.EnterAttempt(5).ok());
}

TEST_F(StepLedgerTest, AnAbortIsCountedOncePerAttempt) {
  EXPECT_TRUE(ledger_.MarkAbortCounted());
  EXPECT_FALSE(ledger_.MarkAbortCounted());
  v1::StepResponse committed;
  ledger_.NoteCommitted(committed);
  EXPECT_TRUE(ledger_.MarkAbortCounted());
}

TEST_F(StepLedgerTest, AReattachingTrainerTakesWhatTheOldOneLeft) {
  ledger_.NoteGathered(1);
  ledger_.NoteGathered(4);
  ledger_.NoteCollectiveIssued();
  EXPECT_EQ(ledger_.TakeHeld(), (std::vector<int>{1, 4}));
  EXPECT_TRUE(ledger_.held().empty());
  EXPECT_TRUE(ledger_.TakeInStep());
  EXPECT_FALSE(ledger_.TakeInStep());  // Taken once.
}

TEST_F(StepLedgerTest, ExportNeedsNothingGatheredOrReduced) {
  EXPECT_TRUE(ledger_.Idle());
  ledger_.NoteGathered(0);
  EXPECT_FALSE(ledger_.Idle());
  ledger_.NoteReleased(0);
  ledger_.NoteReduced(0);
  EXPECT_FALSE(ledger_.Idle());
  ledger_.ResetForEngine();
  EXPECT_TRUE(ledger_.Idle());
}

}  // namespace
}  // namespace shardd::node
