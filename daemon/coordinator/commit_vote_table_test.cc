#include "daemon/coordinator/commit_vote_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

CommitVote Yes(int rank, uint64_t fp = 7) { return {rank, true, "", fp}; }

TEST(CommitVoteTableTest, CommitsWhenAllVoteYes) {
  CommitVoteTable t(3);
  ASSERT_TRUE(t.Vote(5, 1, 0, Yes(0)).ok());
  ASSERT_TRUE(t.Vote(5, 1, 0, Yes(2)).ok());
  EXPECT_FALSE(t.Decision(5, 1).has_value());
  EXPECT_EQ(t.votes(5, 1), 2);
  ASSERT_TRUE(t.Vote(5, 1, 0, Yes(1)).ok());
  std::optional<CommitDecision> d = t.Decision(5, 1);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->commit);
  EXPECT_TRUE(d->dissenting.empty());
}

TEST(CommitVoteTableTest, OneNoRejectsForEveryoneAndNamesTheRank) {
  CommitVoteTable t(2);
  ASSERT_TRUE(t.Vote(1, 3, 2, Yes(0)).ok());
  ASSERT_TRUE(t.Vote(1, 3, 2, {1, false, "reduce-scatter failed", 7}).ok());
  std::optional<CommitDecision> d = t.Decision(1, 3);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->commit);
  EXPECT_THAT(d->dissenting, ElementsAre(1));
  EXPECT_THAT(d->reason, HasSubstr("reduce-scatter failed"));
}

TEST(CommitVoteTableTest, DifferingFingerprintNamesTheOddOneOut) {
  CommitVoteTable t(3);
  ASSERT_TRUE(t.Vote(1, 1, 0, Yes(0, 9)).ok());
  ASSERT_TRUE(t.Vote(1, 1, 0, Yes(1, 7)).ok());
  ASSERT_TRUE(t.Vote(1, 1, 0, Yes(2, 7)).ok());
  std::optional<CommitDecision> d = t.Decision(1, 1);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->commit);
  EXPECT_THAT(d->dissenting, ElementsAre(0));
  EXPECT_THAT(d->reason, HasSubstr("learning rate"));
}

TEST(CommitVoteTableTest, RejectsStepThatIsNotNext) {
  CommitVoteTable t(2);
  absl::Status s = t.Vote(1, 5, 3, Yes(0));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("next step 4"));
  EXPECT_EQ(t.votes(1, 5), 0);
  EXPECT_EQ(t.Vote(1, 0, 0, Yes(0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Vote(1, 1, 0, Yes(2)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CommitVoteTableTest, RepeatedCallAfterDecisionReturnsIt) {
  CommitVoteTable t(1);
  ASSERT_TRUE(t.Vote(2, 1, 0, Yes(0)).ok());
  // The cluster's committed step moved to 1; a retry of step 1 is still
  // answered from the record.
  EXPECT_TRUE(t.Vote(2, 1, 1, Yes(0)).ok());
  ASSERT_TRUE(t.Decision(2, 1).has_value());
  EXPECT_TRUE(t.Decision(2, 1)->commit);
}

TEST(CommitVoteTableTest, RetriedVoteReplacesTheEarlierOne) {
  CommitVoteTable t(2);
  ASSERT_TRUE(t.Vote(1, 1, 0, {0, false, "first", 7}).ok());
  ASSERT_TRUE(t.Vote(1, 1, 0, Yes(0)).ok());
  EXPECT_EQ(t.votes(1, 1), 1);
  ASSERT_TRUE(t.Vote(1, 1, 0, Yes(1)).ok());
  EXPECT_TRUE(t.Decision(1, 1)->commit);
}

TEST(CommitVoteTableTest, DropBeforeForgetsOldEpochs) {
  CommitVoteTable t(2);
  ASSERT_TRUE(t.Vote(1, 1, 0, Yes(0)).ok());
  ASSERT_TRUE(t.Vote(2, 1, 0, Yes(0)).ok());
  ASSERT_TRUE(t.Vote(2, 1, 0, Yes(1)).ok());
  t.DropBefore(2);
  EXPECT_EQ(t.votes(1, 1), 0);
  EXPECT_TRUE(t.Decision(2, 1).has_value());
}

}  // namespace
}  // namespace shardd::coordinator
