#include "daemon/comm/reduce_scatter_algorithm.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

constexpr int64_t kMiBElements = (int64_t{1} << 20) / 4;

TEST(ReduceScatterAlgorithmTest, TwoRanksExchangeDirectlyAtEverySize) {
  for (int64_t count : {int64_t{1}, kMiBElements / 4, kMiBElements,
                        16 * kMiBElements, 256 * kMiBElements}) {
    EXPECT_EQ(ChooseReduceScatterAlgorithm(2, count, ""),
              ReduceScatterAlgorithm::kDirect)
        << count;
  }
  EXPECT_EQ(ChooseReduceScatterAlgorithm(2, 16 * kMiBElements, "ring"),
            ReduceScatterAlgorithm::kRing);
}

TEST(ReduceScatterAlgorithmTest, LargerGroupsGoFromHalvingToDirectToRing) {
  EXPECT_EQ(ChooseReduceScatterAlgorithm(4, kMiBElements / 4, ""),
            ReduceScatterAlgorithm::kHalving);
  EXPECT_EQ(ChooseReduceScatterAlgorithm(3, kMiBElements / 4, ""),
            ReduceScatterAlgorithm::kDirect);
  EXPECT_EQ(ChooseReduceScatterAlgorithm(4, 2 * kMiBElements, ""),
            ReduceScatterAlgorithm::kDirect);
  EXPECT_EQ(ChooseReduceScatterAlgorithm(4, 2 * kMiBElements + 1, ""),
            ReduceScatterAlgorithm::kRing);
  // Halving only where W is a power of two.
  EXPECT_EQ(ChooseReduceScatterAlgorithm(3, 64, "halving"),
            ReduceScatterAlgorithm::kDirect);
}

TEST(ReduceScatterAlgorithmTest, TwoRanksSendBlocksUpToOneMiBWholeThroughTwo) {
  ReduceScatterPipelining small = ChooseReduceScatterPipelining(2, 1000);
  EXPECT_EQ(small.segment_elements, 1000);
  EXPECT_EQ(small.window_segments, 2);
  ReduceScatterPipelining large =
      ChooseReduceScatterPipelining(2, 8 * kMiBElements);
  EXPECT_EQ(large.segment_elements, kMiBElements);
  EXPECT_EQ(large.window_segments, 2);
}

TEST(ReduceScatterAlgorithmTest, LargerGroupsPipelineQuartersWithoutWindow) {
  EXPECT_EQ(ChooseReduceScatterPipelining(4, 1000).segment_elements,
            kMiBElements / 4);
  EXPECT_EQ(ChooseReduceScatterPipelining(4, 2 * kMiBElements).segment_elements,
            kMiBElements / 2);
  ReduceScatterPipelining large =
      ChooseReduceScatterPipelining(8, 64 * kMiBElements);
  EXPECT_EQ(large.segment_elements, kMiBElements);
  EXPECT_EQ(large.window_segments, 0);
}

}  // namespace
}  // namespace shardd::comm
