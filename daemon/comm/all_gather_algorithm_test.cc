#include "daemon/comm/all_gather_algorithm.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(AllGatherAlgorithmTest, TwoRanksGoDirectAtEverySize) {
  for (int64_t part : {int64_t{1}, kMiB, 128 * kMiB}) {
    EXPECT_EQ(ChooseAllGatherAlgorithm(2, part, ""),
              AllGatherAlgorithm::kDirect)
        << part;
  }
}

TEST(AllGatherAlgorithmTest, MoreRanksGoDirectUpToTwoMiBPartsThenRing) {
  for (int world : {3, 4, 8, 64}) {
    EXPECT_EQ(ChooseAllGatherAlgorithm(world, 4096, ""),
              AllGatherAlgorithm::kDirect)
        << world;
    EXPECT_EQ(ChooseAllGatherAlgorithm(world, 2 * kMiB, ""),
              AllGatherAlgorithm::kDirect)
        << world;
    EXPECT_EQ(ChooseAllGatherAlgorithm(world, 2 * kMiB + 1, ""),
              AllGatherAlgorithm::kRing)
        << world;
  }
}

TEST(AllGatherAlgorithmTest, ForcedAlgorithmWinsAndOtherValuesAreIgnored) {
  EXPECT_EQ(ChooseAllGatherAlgorithm(2, kMiB, "ring"),
            AllGatherAlgorithm::kRing);
  EXPECT_EQ(ChooseAllGatherAlgorithm(8, 64 * kMiB, "direct"),
            AllGatherAlgorithm::kDirect);
  EXPECT_EQ(ChooseAllGatherAlgorithm(8, 64 * kMiB, "halving"),
            AllGatherAlgorithm::kRing);
  EXPECT_EQ(ChooseAllGatherAlgorithm(4, kMiB, "split"),
            AllGatherAlgorithm::kDirect);
}

}  // namespace
}  // namespace shardd::comm
