#include "daemon/coordinator/failure_detector.h"

#include <optional>
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

std::vector<Removal> Expire(const std::vector<MemberLiveness>& live) {
  return DecideLeaseExpiry(kT0, live, Options(), std::nullopt).removals;
}

TEST(FailureDetectorTest, NothingExpiresWhileLeasesRun) {
  EXPECT_TRUE(Expire(FourHealthy()).empty());
}

TEST(FailureDetectorTest, MissedLeaseRemovesTheMemberWithAReason) {
  auto live = FourHealthy();
  live[2] = Member(2, absl::Milliseconds(1600));  // Expired 100 ms ago.
  const auto removals = Expire(live);
  ASSERT_EQ(removals.size(), 1u);
  EXPECT_EQ(removals[0].rank, 2);
  EXPECT_NE(removals[0].reason.find("lease expired 100 ms ago"),
            std::string::npos)
      << removals[0].reason;
}

TEST(FailureDetectorTest, LeaseExpiresExactlyAtTheBoundary) {
  auto live = FourHealthy();
  live[1] = Member(1, absl::Milliseconds(1500));
  EXPECT_EQ(Expire(live).size(), 1u);
  live[1] = Member(1, absl::Milliseconds(1499));
  EXPECT_TRUE(Expire(live).empty());
}

// The coordinator's ticker checks every 375 ms (lease / 4).
DetectorOptions Checked() {
  DetectorOptions o = Options();
  o.check_period = absl::Milliseconds(375);
  return o;
}

// Resumed after 5 s stopped: every member's last heartbeat it read is 5 s
// old, every lease ran out meanwhile; none of that is the members' doing.
TEST(FailureDetectorTest, RenewsLeasesThatRanOutWhileTheCoordinatorDidNotRun) {
  std::vector<MemberLiveness> live;
  for (int r = 0; r < 4; ++r) live.push_back(Member(r, absl::Seconds(5)));
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, live, Checked(), std::nullopt, kT0 - absl::Milliseconds(4900));
  EXPECT_TRUE(d.removals.empty());
  EXPECT_EQ(d.renewed, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(d.stalled_for, absl::Milliseconds(4900));
  EXPECT_EQ(d.late, 0);  // Unread heartbeats are not lateness.
  EXPECT_FALSE(d.behind);
}

TEST(FailureDetectorTest, ALeaseThatRanOutBeforeTheStallStillExpires) {
  auto live = FourHealthy();
  // Expired 200 ms before the last check (which, held back by nothing,
  // would have removed it had it run a moment later).
  live[1] = Member(1, absl::Milliseconds(5000));
  live[2] = Member(2, absl::Milliseconds(2000));  // Ran out in the gap.
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, live, Checked(), std::nullopt, kT0 - absl::Milliseconds(3300));
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 1);
  EXPECT_EQ(d.renewed, std::vector<int>{2});
}

TEST(FailureDetectorTest, AGapOfUpToTwoCheckPeriodsIsNoStall) {
  auto live = FourHealthy();
  live[3] = Member(3, absl::Milliseconds(1600));
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, live, Checked(), std::nullopt, kT0 - absl::Milliseconds(750));
  EXPECT_EQ(d.stalled_for, absl::ZeroDuration());
  ASSERT_EQ(d.removals.size(), 1u);
  EXPECT_EQ(d.removals[0].rank, 3);
  EXPECT_TRUE(d.renewed.empty());
}

TEST(FailureDetectorTest, NoStallWithoutACheckPeriodOrBeforeTheFirstCheck) {
  auto live = FourHealthy();
  live[3] = Member(3, absl::Seconds(5));
  // Checked only when told: a long gap means nothing.
  EXPECT_EQ(DecideLeaseExpiry(kT0, live, Options(), std::nullopt,
                              kT0 - absl::Seconds(5))
                .removals.size(),
            1u);
  // No earlier check to measure a gap from.
  EXPECT_EQ(DecideLeaseExpiry(kT0, live, Checked(), std::nullopt,
                              MonoTime::InfinitePast())
                .removals.size(),
            1u);
}

// W members, the first `late` of them silent for `silent`, the rest
// heartbeating 100 ms ago.
std::vector<MemberLiveness> Job(int w, int late, absl::Duration silent) {
  std::vector<MemberLiveness> live;
  for (int r = 0; r < w; ++r) {
    live.push_back(Member(r, r < late ? silent : absl::Milliseconds(100)));
  }
  return live;
}

TEST(FailureDetectorTest, ManyMembersLateAtOnceHoldTheirExpiryBack) {
  // 300 of 1,024 silent for 1.6 s: the coordinator is behind.
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, Job(1024, 300, absl::Milliseconds(1600)), Options(), std::nullopt);
  EXPECT_TRUE(d.behind);
  EXPECT_EQ(d.late, 300);
  EXPECT_EQ(d.deferred, 300);
  EXPECT_TRUE(d.removals.empty());
}

TEST(FailureDetectorTest, LateButNotExpiredMembersCountTowardsBehind) {
  // 200 expired and 100 more a heartbeat overdue (1.1 s): 300 late of
  // 1,024 (over a tenth), so the 200 are held.
  auto live = Job(1024, 200, absl::Milliseconds(1600));
  for (int r = 200; r < 300; ++r) live[r] = Member(r, absl::Milliseconds(1100));
  const LeaseExpiryDecision d =
      DecideLeaseExpiry(kT0, live, Options(), std::nullopt);
  EXPECT_EQ(d.late, 300);
  EXPECT_TRUE(d.behind);
  EXPECT_EQ(d.deferred, 200);
  EXPECT_TRUE(d.removals.empty());
}

TEST(FailureDetectorTest, AFewFailuresInALargeJobAreRemovedAtOnce) {
  // 64 of 1,024 (a rack) is a real failure, not the coordinator.
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, Job(1024, 64, absl::Milliseconds(1600)), Options(), std::nullopt);
  EXPECT_FALSE(d.behind);
  EXPECT_EQ(d.removals.size(), 64u);
}

TEST(FailureDetectorTest, SmallJobsNeverHoldExpiry) {
  // Half of a job of 8 is fewer than behind_min_late (16) members.
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, Job(8, 4, absl::Milliseconds(1600)), Options(), std::nullopt);
  EXPECT_FALSE(d.behind);
  EXPECT_EQ(d.removals.size(), 4u);
}

TEST(FailureDetectorTest, HeldExpiryEndsAfterTheLongestDeferral) {
  const auto live = Job(1024, 300, absl::Milliseconds(1600));
  const DetectorOptions o = Options();
  const LeaseExpiryDecision held = DecideLeaseExpiry(
      kT0, live, o, kT0 - o.max_expiry_deferral + absl::Milliseconds(1));
  EXPECT_TRUE(held.removals.empty());
  const LeaseExpiryDecision over =
      DecideLeaseExpiry(kT0, live, o, kT0 - o.max_expiry_deferral);
  EXPECT_TRUE(over.behind);
  ASSERT_EQ(over.removals.size(), 300u);
  EXPECT_NE(over.removals[0].reason.find("expiries held for 15000 ms"),
            std::string::npos)
      << over.removals[0].reason;
}

TEST(FailureDetectorTest, ASpellLastsUntilHalfTheThresholdIsLate) {
  // The threshold at 1,024 is 102.4 late; once behind, 51.2.
  const auto live = Job(1024, 80, absl::Milliseconds(1600));
  EXPECT_FALSE(DecideLeaseExpiry(kT0, live, Options(), std::nullopt).behind);
  const LeaseExpiryDecision in_spell =
      DecideLeaseExpiry(kT0, live, Options(), kT0 - absl::Seconds(1));
  EXPECT_TRUE(in_spell.behind);
  EXPECT_TRUE(in_spell.removals.empty());
}

TEST(FailureDetectorTest, ASpellThatEndsRenewsTheLeasesItHeldOnce) {
  // 40 still expired when the spell ends (40 < 51.2): their heartbeats
  // may still be queued, so they get one more lease instead of removal.
  const LeaseExpiryDecision d =
      DecideLeaseExpiry(kT0, Job(1024, 40, absl::Milliseconds(1600)), Options(),
                        kT0 - absl::Seconds(3));
  EXPECT_FALSE(d.behind);
  EXPECT_TRUE(d.removals.empty());
  EXPECT_EQ(d.renewed.size(), 40u);
}

TEST(FailureDetectorTest, ZeroDeferralNeverHolds) {
  DetectorOptions o = Options();
  o.max_expiry_deferral = absl::ZeroDuration();
  const LeaseExpiryDecision d = DecideLeaseExpiry(
      kT0, Job(1024, 300, absl::Milliseconds(1600)), o, std::nullopt);
  EXPECT_EQ(d.removals.size(), 300u);
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
