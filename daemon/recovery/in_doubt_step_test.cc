#include "daemon/recovery/in_doubt_step.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardd::recovery {
namespace {

std::vector<v1::MemberInfo> Members(const std::vector<int64_t>& steps) {
  std::vector<v1::MemberInfo> members;
  for (size_t r = 0; r < steps.size(); ++r) {
    v1::MemberInfo& m = members.emplace_back();
    m.set_rank(static_cast<int>(r));
    m.set_committed_step(steps[r]);
  }
  return members;
}

TEST(InDoubtStepTest, AppliedWhenAnotherMemberCommittedIt) {
  // Rank 1 heard "commit" for step 5; ranks 0, 2 and 3 did not.
  EXPECT_TRUE(InDoubtStepWasCommitted(5, 0, 4, Members({4, 5, 4, 4})));
  EXPECT_TRUE(InDoubtStepWasCommitted(5, 3, 4, Members({4, 5, 4, 4})));
}

TEST(InDoubtStepTest, DroppedWhenNobodyCommittedIt) {
  EXPECT_FALSE(InDoubtStepWasCommitted(5, 0, 4, Members({4, 4, 4, 4})));
}

TEST(InDoubtStepTest, IgnoresItsOwnEntry) {
  // Its own committed step says nothing about the decision.
  EXPECT_FALSE(InDoubtStepWasCommitted(5, 1, 4, Members({4, 5, 4, 4})));
}

TEST(InDoubtStepTest, ALaterStepElsewhereAlsoMeansCommitted) {
  // A replacement that joined without a shard reports the cluster's
  // committed step, which only a decision raised to 5.
  EXPECT_TRUE(InDoubtStepWasCommitted(5, 2, 4, Members({4, 4, 4, 6})));
}

TEST(InDoubtStepTest, AppliedWhenTheCoordinatorRecordedTheCommit) {
  // The decision raised the cluster's step before any heartbeat said so
  // (or before any member heard it).
  EXPECT_TRUE(InDoubtStepWasCommitted(5, 2, 5, Members({4, 4, 4, 4})));
  EXPECT_FALSE(InDoubtStepWasCommitted(5, 2, 4, Members({4, 4, 4, 4})));
}

TEST(InDoubtStepTest, NoOtherMembersMeansDropped) {
  EXPECT_FALSE(InDoubtStepWasCommitted(5, 0, 4, Members({4})));
  EXPECT_FALSE(InDoubtStepWasCommitted(5, 0, 4, {}));
}

}  // namespace
}  // namespace shardd::recovery
