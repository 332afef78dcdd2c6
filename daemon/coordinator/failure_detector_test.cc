#include "daemon/coordinator/failure_detector.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

// Time comes from here, never from the wall clock.
const MonoTime kT0 = MonoTime::FromOrigin(absl::Seconds(1'000'000));

DetectorOptions Options() {
  DetectorOptions o;
  o.lease = absl::Milliseconds(1500);
  o.accusation_window = absl::Seconds(30);
  return o;
}

// A member that heartbeated `ago` before kT0 with a fresh 1.5 s lease then.
MemberLiveness Member(int rank, absl::Duration ago) {
  return {rank, kT0 - ago, kT0 - ago + absl::Milliseconds(1500)};
}

std::vector<MemberLiveness> FourHealthy() {
  return {
      Member(0, absl::Milliseconds(100)), Member(1, absl::Milliseconds(200)),
      Member(2, absl::Milliseconds(300)), Member(3, absl::Milliseconds(50))};
}

TEST(FailureDetectorTest, NothingExpiresWhileLeasesRun) {
  EXPECT_TRUE(DecideLeaseExpiry(kT0, FourHealthy(), Options()).empty());
}

TEST(FailureDetectorTest, MissedLeaseRemovesTheMemberWithAReason) {
  auto live = FourHealthy();
  live[2] = Member(2, absl::Milliseconds(1600));  // Expired 100 ms ago.
  const auto removals = DecideLeaseExpiry(kT0, live, Options());
  ASSERT_EQ(removals.size(), 1u);
  EXPECT_EQ(removals[0].rank, 2);
  EXPECT_NE(removals[0].reason.find("lease expired 100 ms ago"),
            std::string::npos)
      << removals[0].reason;
}

TEST(FailureDetectorTest, LeaseExpiresExactlyAtTheBoundary) {
  auto live = FourHealthy();
  live[1] = Member(1, absl::Milliseconds(1500));
  EXPECT_EQ(DecideLeaseExpiry(kT0, live, Options()).size(), 1u);
  live[1] = Member(1, absl::Milliseconds(1499));
  EXPECT_TRUE(DecideLeaseExpiry(kT0, live, Options()).empty());
}

TEST(FailureDetectorTest, FastPathRemovesTheSuspectAtOnce) {
  // Rank 3 was killed 10 ms ago: its lease still runs, but rank 1 saw the
  // collective fail.
  const auto d = DecideReport(kT0, {1, 3, kT0}, FourHealthy(), {},
                              ProbeResult::kNotProbed, Options());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 3);
  EXPECT_NE(d.reason.find("fast path"), std::string::npos);
}

TEST(FailureDetectorTest, UnansweredProbeRemovesTheSuspect) {
  const auto d = DecideReport(kT0, {1, 3, kT0}, FourHealthy(), {},
                              ProbeResult::kUnreachable, Options());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 3);
  EXPECT_NE(d.reason.find("probe"), std::string::npos);
}

TEST(FailureDetectorTest, ExpiredSuspectIsRemovedEvenIfProbeAnswers) {
  auto live = FourHealthy();
  live[3] = Member(3, absl::Seconds(2));
  const auto d =
      DecideReport(kT0, {1, 3, kT0}, live, {}, ProbeResult::kAlive, Options());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 3);
}

TEST(FailureDetectorTest, BothAliveRemovesNobody) {
  const auto d = DecideReport(kT0, {1, 3, kT0}, FourHealthy(), {},
                              ProbeResult::kAlive, Options());
  EXPECT_TRUE(d.removals.empty());
  EXPECT_NE(d.reason.find("both alive"), std::string::npos);
}

TEST(FailureDetectorTest, SickReporterAccusingSecondHealthyMemberIsRemoved) {
  // Rank 0 already accused rank 2 (still heartbeating); now it accuses rank
  // 3. It is the odd one out: rank 0 goes, not the healthy rank 3.
  const std::vector<Accusation> recent = {{0, 2, kT0 - absl::Seconds(1)}};
  const auto d = DecideReport(kT0, {0, 3, kT0}, FourHealthy(), recent,
                              ProbeResult::kNotProbed, Options());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 0);
  EXPECT_NE(d.reason.find("odd one out"), std::string::npos);
}

TEST(FailureDetectorTest, AccusedReporterCannotEvictAHealthyMember) {
  // Rank 2 accused rank 0 a moment ago; rank 0 now accuses the healthy
  // rank 3: dismissed.
  const std::vector<Accusation> recent = {{2, 0, kT0 - absl::Seconds(2)}};
  const auto d = DecideReport(kT0, {0, 3, kT0}, FourHealthy(), recent,
                              ProbeResult::kNotProbed, Options());
  EXPECT_TRUE(d.removals.empty());
  EXPECT_NE(d.reason.find("dismissed"), std::string::npos);
}

TEST(FailureDetectorTest, OddOneOutDoesNotProtectADeadSuspect) {
  // Even a suspicious reporter is right when the suspect has stopped
  // heartbeating (1 s > lease/3) and the probe fails.
  auto live = FourHealthy();
  live[3] = Member(3, absl::Seconds(1));
  const std::vector<Accusation> recent = {{0, 2, kT0 - absl::Seconds(1)}};
  const auto d = DecideReport(kT0, {0, 3, kT0}, live, recent,
                              ProbeResult::kNotProbed, Options());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 3);
}

TEST(FailureDetectorTest, OldAccusationsFallOutOfTheWindow) {
  const std::vector<Accusation> recent = {{0, 2, kT0 - absl::Seconds(31)},
                                          {2, 0, kT0 - absl::Seconds(40)}};
  const auto d = DecideReport(kT0, {0, 3, kT0}, FourHealthy(), recent,
                              ProbeResult::kNotProbed, Options());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 3);
}

TEST(FailureDetectorTest, ReportAgainstARemovedMemberIsDismissed) {
  auto live = FourHealthy();
  live.pop_back();  // Rank 3 already gone.
  const auto d = DecideReport(kT0, {1, 3, kT0}, live, {},
                              ProbeResult::kNotProbed, Options());
  EXPECT_TRUE(d.removals.empty());
  EXPECT_NE(d.reason.find("no longer a member"), std::string::npos);
}

}  // namespace
}  // namespace shardd::coordinator
