#include "daemon/comm/all_reduce_algorithm.h"

#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

TEST(AllReduceAlgorithmTest, TwoRanksFuseUnlessSplitIsForced) {
  EXPECT_EQ(ChooseAllReduceAlgorithm(2, ""), AllReduceAlgorithm::kPairFused);
  EXPECT_EQ(ChooseAllReduceAlgorithm(2, "ring"),
            AllReduceAlgorithm::kPairFused);
  EXPECT_EQ(ChooseAllReduceAlgorithm(2, "split"),
            AllReduceAlgorithm::kReduceScatterThenGather);
}

TEST(AllReduceAlgorithmTest, OtherGroupSizesReduceScatterThenGather) {
  for (int world : {1, 3, 4, 8}) {
    EXPECT_EQ(ChooseAllReduceAlgorithm(world, ""),
              AllReduceAlgorithm::kReduceScatterThenGather)
        << world;
  }
}

}  // namespace
}  // namespace shardd::comm
