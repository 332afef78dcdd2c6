#include "daemon/coordinator/partition_verdict.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

// W = 4: `cut` reports every other member unreachable and they report it.
std::vector<ReachabilityReport> OneCutOff(int w, int cut) {
  std::vector<ReachabilityReport> reports;
  for (int r = 0; r < w; ++r) {
    ReachabilityReport report{r, {}};
    for (int o = 0; o < w; ++o) {
      if (o != r && (r == cut || o == cut)) report.unreachable.push_back(o);
    }
    reports.push_back(report);
  }
  return reports;
}

TEST(PartitionVerdictTest, NothingReportedDecidesNothing) {
  const PartitionVerdict v =
      DecidePartition({{0, {}}, {1, {}}, {2, {}}, {3, {}}}, 1);
  EXPECT_EQ(v.kind, PartitionKind::kNone);
  EXPECT_THAT(v.cut_off, IsEmpty());
  EXPECT_THAT(v.broken_links, IsEmpty());
}

TEST(PartitionVerdictTest, MemberCutOffFromAllPeersIsNamed) {
  const PartitionVerdict v = DecidePartition(OneCutOff(4, 2), 1);
  EXPECT_EQ(v.kind, PartitionKind::kCutOff);
  EXPECT_THAT(v.cut_off, ElementsAre(2));
  EXPECT_THAT(v.broken_links, ElementsAre(Pair(0, 2), Pair(1, 2), Pair(2, 3)));
  EXPECT_THAT(v.reason, HasSubstr("rank 2 cut off from its peers"));
  EXPECT_THAT(v.reason, HasSubstr("ranks 0, 1, 3"));
}

TEST(PartitionVerdictTest, OneSidedReportsAreNotBrokenLinks) {
  // Rank 2's probes all time out (a starved or stopped prober) but the
  // others reach it: nothing is broken both ways.
  const PartitionVerdict v =
      DecidePartition({{0, {}}, {1, {}}, {2, {0, 1, 3}}, {3, {}}}, 1);
  EXPECT_EQ(v.kind, PartitionKind::kNone);
  // And the converse: everyone accuses a member that cannot report (hung).
  const PartitionVerdict hung =
      DecidePartition({{0, {2}}, {1, {2}}, {2, {}}, {3, {2}}}, 1);
  EXPECT_EQ(hung.kind, PartitionKind::kNone);
}

TEST(PartitionVerdictTest, SingleBrokenLinkIsAmbiguous) {
  const PartitionVerdict v =
      DecidePartition({{0, {1}}, {1, {0}}, {2, {}}, {3, {}}}, 1);
  EXPECT_EQ(v.kind, PartitionKind::kAmbiguous);
  EXPECT_THAT(v.cut_off, IsEmpty());
  EXPECT_THAT(v.reason, HasSubstr("cannot tell which side"));
  EXPECT_THAT(v.reason, HasSubstr("{0}, {1}"));
}

TEST(PartitionVerdictTest, TwoMembersAreNeverSplit) {
  // W = 2: a majority must remain, so neither side can be removed.
  const PartitionVerdict v = DecidePartition({{0, {1}}, {1, {0}}}, 0);
  EXPECT_EQ(v.kind, PartitionKind::kTooMany);
  EXPECT_THAT(v.cut_off, IsEmpty());
}

TEST(PartitionVerdictTest, MemberWithMostBrokenLinksIsTheUniqueCover) {
  // Rank 3 lost links to 0, 1 and 2, and nothing else is broken: only {3}
  // explains all of them (though 3-0 alone would be ambiguous).
  const PartitionVerdict v = DecidePartition(
      {{0, {3}}, {1, {3}}, {2, {3}}, {3, {0, 1, 2}}, {4, {}}}, 2);
  EXPECT_EQ(v.kind, PartitionKind::kCutOff);
  EXPECT_THAT(v.cut_off, ElementsAre(3));
  // Rank 3 reaching rank 4 does not change it.
}

TEST(PartitionVerdictTest, TwoMembersCutOffAtW8) {
  // W = 8, ranks 5 and 6 cut off from everyone (and from each other).
  std::vector<ReachabilityReport> reports;
  for (int r = 0; r < 8; ++r) {
    ReachabilityReport report{r, {}};
    for (int o = 0; o < 8; ++o) {
      const bool cut = r == 5 || r == 6 || o == 5 || o == 6;
      if (o != r && cut) report.unreachable.push_back(o);
    }
    reports.push_back(report);
  }
  const PartitionVerdict v = DecidePartition(reports, 3);
  EXPECT_EQ(v.kind, PartitionKind::kCutOff);
  EXPECT_THAT(v.cut_off, ElementsAre(5, 6));
  EXPECT_THAT(v.reason, HasSubstr("ranks 5, 6 cut off from their peers"));
}

TEST(PartitionVerdictTest, HalfAndHalfSplitRemovesNoOne) {
  // {0, 1} | {2, 3}: a cover needs two members but only one may go.
  const PartitionVerdict v =
      DecidePartition({{0, {2, 3}}, {1, {2, 3}}, {2, {0, 1}}, {3, {0, 1}}}, 1);
  EXPECT_EQ(v.kind, PartitionKind::kTooMany);
  EXPECT_THAT(v.cut_off, IsEmpty());
  EXPECT_THAT(v.reason, HasSubstr("a strict majority must remain"));
}

TEST(PartitionVerdictTest, LargeCoversAreNotSearched) {
  // W = 12, ranks 0-5 each cut from 6-11: a cover needs 6 members, more
  // than the search bound even though max_cut_off would allow 5.
  std::vector<ReachabilityReport> reports;
  for (int r = 0; r < 12; ++r) {
    ReachabilityReport report{r, {}};
    for (int o = 0; o < 12; ++o) {
      if ((r < 6) != (o < 6)) report.unreachable.push_back(o);
    }
    reports.push_back(report);
  }
  const PartitionVerdict v = DecidePartition(reports, 5);
  EXPECT_EQ(v.kind, PartitionKind::kTooMany);
  EXPECT_THAT(v.cut_off, IsEmpty());
}

TEST(PartitionVerdictTest, SelfReportsAreIgnored) {
  const PartitionVerdict v = DecidePartition({{0, {0}}, {1, {1}}, {2, {}}}, 1);
  EXPECT_EQ(v.kind, PartitionKind::kNone);
}

}  // namespace
}  // namespace shardd::coordinator
