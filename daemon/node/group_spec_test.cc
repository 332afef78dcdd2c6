#include "daemon/node/group_spec.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

TEST(GroupSpecTest, ToGlooOptionsCopiesEveryField) {
  GroupSpec spec;
  spec.rank = 3;
  spec.size = 4;
  spec.epoch = 17;
  spec.group = "replica/1";
  spec.job_ranks = {1, 3, 5, 7};
  spec.listen_host = "10.0.0.7";
  spec.connect_timeout = absl::Seconds(12);
  spec.default_op_timeout = absl::Milliseconds(2500);
  const comm::GlooCollectiveOptions options = ToGlooOptions(spec);
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.size, 4);
  EXPECT_EQ(options.epoch, 17);
  EXPECT_EQ(options.group, "replica/1");
  EXPECT_EQ(options.job_ranks, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(options.hostname, "10.0.0.7");
  EXPECT_EQ(options.connect_timeout, absl::Seconds(12));
  EXPECT_EQ(options.default_op_timeout, absl::Milliseconds(2500));
}

TEST(GroupSpecTest, GroupJobRanksFollowTheShardPlan) {
  // W = 8, F = 4: shard groups {0..3}, {4..7}; replica groups {i, i + 4}.
  EXPECT_EQ(ShardGroupJobRanks(6, 4), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(ShardGroupJobRanks(0, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ReplicaGroupJobRanks(6, 8, 4), (std::vector<int>{2, 6}));
  // F = 1 (DDP): every rank is its own shard group, one replica group.
  EXPECT_EQ(ShardGroupJobRanks(2, 1), (std::vector<int>{2}));
  EXPECT_EQ(ReplicaGroupJobRanks(2, 3, 1), (std::vector<int>{0, 1, 2}));
  // Each rank sits at its own group rank in both.
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(ShardGroupJobRanks(r, 4)[r % 4], r);
    EXPECT_EQ(ReplicaGroupJobRanks(r, 8, 4)[r / 4], r);
  }
}

TEST(GroupSpecTest, NcclGroupNameReplacesSlashesOnly) {
  EXPECT_EQ(NcclGroupName("shard/0"), "shard.0");
  EXPECT_EQ(NcclGroupName("replica/12"), "replica.12");
  EXPECT_EQ(NcclGroupName("world"), "world");
  EXPECT_NE(NcclGroupName("shard/1"), NcclGroupName("replica/1"));
}

}  // namespace
}  // namespace shardd::node
