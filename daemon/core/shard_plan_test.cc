#include "daemon/core/shard_plan.h"

#include <string>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

void ExpectRejected(const absl::StatusOr<ShardPlan>& plan,
                    absl::string_view field) {
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(std::string(field)), std::string::npos)
      << plan.status().message();
}

TEST(ShardPlanTest, HybridShardGroupsAndReplicaGroups) {
  // W = 8, F = 2: shard groups {0,1} {2,3} {4,5} {6,7}; replicas of shard 1
  // are the odd ranks.
  auto plan = ShardPlan::Create(8, ShardingStrategy::kHybridShard, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_replicas(), 4);
  EXPECT_TRUE(plan->has_replica());
  EXPECT_TRUE(plan->reshard_after_forward());
  auto p = plan->Placement(5);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->shard_group, 2);
  EXPECT_EQ(p->shard_index, 1);
  EXPECT_EQ(p->shard_group_ranks, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(p->replica_group_ranks, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(*plan->ReplicasOf(0), (std::vector<int64_t>{0, 2, 4, 6}));
}

TEST(ShardPlanTest, FullShardIsOneGroupWithoutReplicas) {
  auto plan = ShardPlan::Create(4, ShardingStrategy::kFullShard);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->sharding_factor(), 4);
  EXPECT_FALSE(plan->has_replica());
  auto p = plan->Placement(3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->shard_group_ranks, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(p->replica_group_ranks, (std::vector<int64_t>{3}));
  EXPECT_EQ(p->shard_index, 3);
}

TEST(ShardPlanTest, NoShardReplicatesEverywhere) {
  auto plan = ShardPlan::Create(3, ShardingStrategy::kNoShard);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->sharding_factor(), 1);
  EXPECT_EQ(plan->num_replicas(), 3);
  auto p = plan->Placement(2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->shard_group_ranks, (std::vector<int64_t>{2}));
  EXPECT_EQ(p->replica_group_ranks, (std::vector<int64_t>{0, 1, 2}));
}

TEST(ShardPlanTest, ShardGradOpKeepsParametersGatheredAndAllowsHybrid) {
  auto plan = ShardPlan::Create(4, ShardingStrategy::kShardGradOp);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->sharding_factor(), 4);
  EXPECT_FALSE(plan->reshard_after_forward());
  auto hybrid = ShardPlan::Create(4, ShardingStrategy::kShardGradOp, 2);
  ASSERT_TRUE(hybrid.ok());
  EXPECT_TRUE(hybrid->has_replica());
}

TEST(ShardPlanTest, SingleRankIsValid) {
  auto plan = ShardPlan::Create(1, ShardingStrategy::kFullShard);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->has_replica());
}

TEST(ShardPlanTest, EveryRankAppearsInExactlyOneShardAndOneReplicaGroup) {
  for (int64_t w : {1, 2, 4, 6, 8, 12}) {
    for (int64_t f = 1; f <= w; ++f) {
      if (w % f != 0) continue;
      auto plan = ShardPlan::Create(w, ShardingStrategy::kHybridShard, f);
      ASSERT_TRUE(plan.ok());
      for (int64_t r = 0; r < w; ++r) {
        auto p = plan->Placement(r);
        ASSERT_TRUE(p.ok());
        EXPECT_EQ(p->shard_group * f + p->shard_index, r);
        EXPECT_EQ(static_cast<int64_t>(p->shard_group_ranks.size()), f);
        EXPECT_EQ(static_cast<int64_t>(p->replica_group_ranks.size()), w / f);
        for (int64_t peer : p->replica_group_ranks) EXPECT_EQ(peer % f, r % f);
        for (int64_t peer : p->shard_group_ranks) EXPECT_EQ(peer / f, r / f);
      }
    }
  }
}

TEST(ShardPlanTest, RejectsShardingFactorNotDividingWorldSize) {
  ExpectRejected(ShardPlan::Create(6, ShardingStrategy::kHybridShard, 4),
                 "sharding_factor (4) must divide world_size (6)");
}

TEST(ShardPlanTest, RejectsShardingFactorAboveWorldSize) {
  ExpectRejected(ShardPlan::Create(4, ShardingStrategy::kHybridShard, 8),
                 "must not exceed world_size");
}

TEST(ShardPlanTest, RejectsNonPositiveWorldSize) {
  ExpectRejected(ShardPlan::Create(0, ShardingStrategy::kFullShard),
                 "world_size");
  ExpectRejected(ShardPlan::Create(-3, ShardingStrategy::kNoShard),
                 "world_size");
}

TEST(ShardPlanTest, RejectsNegativeShardingFactor) {
  ExpectRejected(ShardPlan::Create(4, ShardingStrategy::kHybridShard, -2),
                 "sharding_factor");
}

TEST(ShardPlanTest, RejectsFactorsContradictingTheStrategy) {
  ExpectRejected(ShardPlan::Create(4, ShardingStrategy::kFullShard, 2),
                 "FULL_SHARD");
  ExpectRejected(ShardPlan::Create(4, ShardingStrategy::kNoShard, 2),
                 "NO_SHARD");
  ExpectRejected(ShardPlan::Create(4, ShardingStrategy::kHybridShard, 0),
                 "sharding_factor is required");
}

TEST(ShardPlanTest, RejectsUnknownStrategy) {
  ExpectRejected(ShardPlan::Create(4, static_cast<ShardingStrategy>(0), 2),
                 "strategy");
}

TEST(ShardPlanTest, RejectsRanksOutsideThePlan) {
  auto plan = ShardPlan::Create(4, ShardingStrategy::kHybridShard, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->Placement(4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan->Placement(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan->ReplicasOf(2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::core
