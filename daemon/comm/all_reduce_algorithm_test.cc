#include "daemon/comm/all_reduce_algorithm.h"

#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

constexpr int64_t kMax = kPairExchangeMaxBytes;

TEST(AllReduceAlgorithmTest, TwoRanksExchangeUpToTheLimitAndFuseAbove) {
  for (int64_t bytes : {int64_t{0}, int64_t{4}, int64_t{4096}, kMax}) {
    EXPECT_EQ(ChooseAllReduceAlgorithm(2, bytes, ""),
              AllReduceAlgorithm::kPairExchange)
        << bytes;
  }
  for (int64_t bytes : {kMax + 4, 4 * kMax, int64_t{1} << 40}) {
    EXPECT_EQ(ChooseAllReduceAlgorithm(2, bytes, ""),
              AllReduceAlgorithm::kPairFused)
        << bytes;
  }
  // An unknown value is the default, not an error: the same on every rank.
  EXPECT_EQ(ChooseAllReduceAlgorithm(2, 4 * kMax, "ring"),
            AllReduceAlgorithm::kPairFused);
}

TEST(AllReduceAlgorithmTest, AForcedAlgorithmHoldsAtEverySize) {
  for (int64_t bytes : {int64_t{4}, kMax, 4 * kMax}) {
    EXPECT_EQ(ChooseAllReduceAlgorithm(2, bytes, "split"),
              AllReduceAlgorithm::kReduceScatterThenGather);
    EXPECT_EQ(ChooseAllReduceAlgorithm(2, bytes, "fused"),
              AllReduceAlgorithm::kPairFused);
    EXPECT_EQ(ChooseAllReduceAlgorithm(2, bytes, "exchange"),
              AllReduceAlgorithm::kPairExchange);
  }
}

TEST(AllReduceAlgorithmTest, OtherGroupSizesReduceScatterThenGather) {
  for (int world : {1, 3, 4, 8}) {
    for (absl::string_view forced : {"", "fused", "exchange"}) {
      EXPECT_EQ(ChooseAllReduceAlgorithm(world, 4, forced),
                AllReduceAlgorithm::kReduceScatterThenGather)
          << world << " " << forced;
    }
  }
}

}  // namespace
}  // namespace shardd::comm
