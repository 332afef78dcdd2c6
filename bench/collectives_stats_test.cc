#include "bench/collectives_stats.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::bench {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(CollectivesStatsTest, MedianOfOddEvenAndEmptySamples) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

TEST(CollectivesStatsTest, MedianCiBracketsTheMedianAndNarrowsWithSamples) {
  std::vector<double> small, large;
  for (int i = 1; i <= 9; ++i) small.push_back(i);
  for (int i = 1; i <= 401; ++i) large.push_back(i / 45.0);
  const MedianCi s = MedianWithCi(small);
  EXPECT_DOUBLE_EQ(s.median, 5);
  // n = 9: order statistics 4.5 -+ 2.94, i.e. indices 1 and 8 (0-based).
  EXPECT_DOUBLE_EQ(s.lo, 2);
  EXPECT_DOUBLE_EQ(s.hi, 9);
  const MedianCi l = MedianWithCi(large);
  EXPECT_LE(l.lo, l.median);
  EXPECT_GE(l.hi, l.median);
  // The same spread per unit of range, but 401 samples: +-0.98 sqrt(401)
  // ~ 19.6 ranks of 1/45 each, against 9 samples' whole range.
  EXPECT_LT((l.hi - l.lo) / (401 / 45.0), (s.hi - s.lo) / 9.0);
}

TEST(CollectivesStatsTest, MedianCiOfOneSampleIsThatSample) {
  const MedianCi ci = MedianWithCi({0.8});
  EXPECT_DOUBLE_EQ(ci.median, 0.8);
  EXPECT_DOUBLE_EQ(ci.lo, 0.8);
  EXPECT_DOUBLE_EQ(ci.hi, 0.8);
}

TEST(CollectivesStatsTest, PairedRatiosScaleAndSkipSidesThatDidNotRun) {
  const std::vector<double> gloo = {2.0, 4.0, 6.0, 1.0};
  const std::vector<double> ours = {1.0, 0.0, 3.0};
  // Index 1 (ours 0: did not run) and index 3 (no partner) are left out.
  EXPECT_EQ(PairedRatios(gloo, ours), (std::vector<double>{2.0, 2.0}));
  EXPECT_EQ(PairedRatios(gloo, ours, 0.5), (std::vector<double>{1.0, 1.0}));
}

TEST(CollectivesStatsTest, BarPassesWhenMediansAndWorstPointAreWithinBounds) {
  const std::vector<BarPoint> points = {
      {"allgather", 2, kMiB, 1.00, 1.01},
      {"allgather", 2, 4 * kMiB, 0.98, 0.99},
      {"allgather", 2, 16 * kMiB, 0.90, 0.93},  // worst: 0.03 under control
      {"allgather", 4, kMiB, 0.99, 0.95},
      // Below 1 MiB: ignored however low.
      {"allgather", 2, kMiB / 4, 0.10, 1.00},
  };
  const std::vector<BarVerdict> v = EvaluateBar(points, BarRule());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].op, "allgather");
  EXPECT_DOUBLE_EQ(v[0].median_by_world.at(2), 0.98);
  EXPECT_DOUBLE_EQ(v[0].median_by_world.at(4), 0.99);
  EXPECT_DOUBLE_EQ(v[0].control_median_by_world.at(2), 0.99);
  EXPECT_DOUBLE_EQ(v[0].worst.ratio, 0.90);
  EXPECT_EQ(v[0].worst.world, 2);
  EXPECT_EQ(v[0].worst.bytes, 16 * kMiB);
  EXPECT_DOUBLE_EQ(v[0].control_worst.ratio, 0.93);
  EXPECT_EQ(v[0].control_worst.bytes, 16 * kMiB);
  EXPECT_NEAR(v[0].worst_minus_control_worst, -0.03, 1e-12);
  EXPECT_TRUE(v[0].pass);
  EXPECT_TRUE(v[0].failures.empty());
  const std::string line = BarSummaryLine(v[0], BarRule());
  EXPECT_EQ(line.rfind("allgather: PASS (", 0), 0u) << line;
  EXPECT_NE(line.find("W = 2: 0.98, W = 4: 0.99"), std::string::npos) << line;
}

TEST(CollectivesStatsTest, BarFailsNamingTheLowMedianWorldAndTheLowPoints) {
  const std::vector<BarPoint> points = {
      {"reducescatter", 2, kMiB, 1.10, 1.00},
      {"reducescatter", 2, 4 * kMiB, 1.05, 0.95},
      {"reducescatter", 4, kMiB, 0.96, 0.98},
      {"reducescatter", 4, 4 * kMiB, 0.80, 1.00},   // < 0.95 - 0.05
      {"reducescatter", 4, 16 * kMiB, 0.89, 1.02},  // < 0.90 too
  };
  const std::vector<BarVerdict> v = EvaluateBar(points, BarRule());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].median_by_world.count(2));
  EXPECT_DOUBLE_EQ(v[0].median_by_world.at(4), 0.89);
  EXPECT_FALSE(v[0].median_pass);
  EXPECT_FALSE(v[0].worst_pass);
  EXPECT_FALSE(v[0].pass);
  EXPECT_DOUBLE_EQ(v[0].control_worst.ratio, 0.95);
  EXPECT_NEAR(v[0].worst_minus_control_worst, -0.15, 1e-12);
  ASSERT_EQ(v[0].failures.size(), 3u);
  EXPECT_EQ(v[0].failures[0], "median 0.89 < 0.97 at W = 4");
  EXPECT_EQ(v[0].failures[1],
            "point 0.80 (W = 4, 4 MiB) < control worst 0.95 - 0.05");
  EXPECT_EQ(v[0].failures[2],
            "point 0.89 (W = 4, 16 MiB) < control worst 0.95 - 0.05");
  const std::string line = BarSummaryLine(v[0], BarRule());
  EXPECT_EQ(line.rfind("reducescatter: FAIL: median 0.89 < 0.97 at W = 4; ", 0),
            0u)
      << line;
}

TEST(CollectivesStatsTest, WorstPointExactlyAtTheMarginPasses) {
  const std::vector<BarPoint> points = {
      {"broadcast", 2, kMiB, 1.00, 0.875},
      {"broadcast", 2, 4 * kMiB, 0.8125, 1.0},  // 0.875 - 0.0625
  };
  BarRule rule;
  rule.control_margin = 0.0625;  // exact in binary
  rule.median_at_least = 0.5;
  const std::vector<BarVerdict> v = EvaluateBar(points, rule);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].worst_pass);
  EXPECT_TRUE(v[0].pass);
}

TEST(CollectivesStatsTest, OneVerdictPerOperationInNameOrder) {
  const std::vector<BarPoint> points = {
      {"reducescatter", 2, kMiB, 1.0, 1.0},
      {"allgather", 2, kMiB, 1.0, 1.0},
      {"broadcast", 2, kMiB / 2, 1.0, 1.0},  // only small sizes: no verdict
  };
  const std::vector<BarVerdict> v = EvaluateBar(points, BarRule());
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].op, "allgather");
  EXPECT_EQ(v[1].op, "reducescatter");
}

TEST(CollectivesStatsTest, BalancedOrderBalancesPositionsAndPredecessors) {
  for (int sides = 1; sides <= 5; ++sides) {
    const int cycle = BalancedOrderCycle(sides);
    // position[s][p]: how often side s ran at position p; after[a][b]: how
    // often b ran right after a.
    std::vector<std::vector<int>> position(sides, std::vector<int>(sides));
    std::vector<std::vector<int>> after(sides, std::vector<int>(sides));
    for (int r = 0; r < cycle; ++r) {
      const std::vector<int> order = BalancedOrder(sides, r);
      ASSERT_EQ(static_cast<int>(order.size()), sides);
      std::vector<int> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int s = 0; s < sides; ++s)
        ASSERT_EQ(sorted[s], s) << "a permutation";
      for (int p = 0; p < sides; ++p) ++position[order[p]][p];
      for (int p = 1; p < sides; ++p) ++after[order[p - 1]][order[p]];
    }
    for (int a = 0; a < sides; ++a) {
      for (int b = 0; b < sides; ++b) {
        EXPECT_EQ(position[a][b], cycle / sides) << sides << " sides";
        if (a != b) {
          EXPECT_EQ(after[a][b], cycle / sides) << sides << " sides";
        }
      }
    }
  }
}

TEST(CollectivesStatsTest, BalancedOrderRepeatsWithItsCycle) {
  EXPECT_EQ(BalancedOrderCycle(4), 4);
  EXPECT_EQ(BalancedOrderCycle(3), 6);
  EXPECT_EQ(BalancedOrder(4, 0), (std::vector<int>{0, 1, 3, 2}));
  EXPECT_EQ(BalancedOrder(4, 5), BalancedOrder(4, 1));
  EXPECT_EQ(BalancedOrder(2, 1), (std::vector<int>{1, 0}));
}

TEST(CollectivesStatsTest, HumanBytesUsesWholeBinaryUnits) {
  EXPECT_EQ(HumanBytes(4096), "4 KiB");
  EXPECT_EQ(HumanBytes(16 * kMiB), "16 MiB");
}

}  // namespace
}  // namespace shardd::bench
