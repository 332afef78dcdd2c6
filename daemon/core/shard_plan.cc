#include "daemon/core/shard_plan.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::core {

absl::string_view ShardingStrategyName(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kFullShard:
      return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp:
      return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard:
      return "NO_SHARD";
    case ShardingStrategy::kHybridShard:
      return "HYBRID_SHARD";
  }
  return "UNKNOWN";
}

absl::StatusOr<ShardPlan> ShardPlan::Create(int64_t world_size,
                                            ShardingStrategy strategy,
                                            int64_t sharding_factor) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  if (sharding_factor < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding_factor must be >= 1 (or 0 for the strategy's default), got ",
        sharding_factor));
  }
  const absl::string_view name = ShardingStrategyName(strategy);
  int64_t f = sharding_factor;
  switch (strategy) {
    case ShardingStrategy::kFullShard:
      if (f == 0) f = world_size;
      if (f != world_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sharding_factor (", f, ") must equal world_size (", world_size,
            ") for FULL_SHARD; use HYBRID_SHARD to shard within groups"));
      }
      break;
    case ShardingStrategy::kNoShard:
      if (f == 0) f = 1;
      if (f != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("sharding_factor (", f, ") must be 1 for NO_SHARD"));
      }
      break;
    case ShardingStrategy::kShardGradOp:
      if (f == 0) f = world_size;
      break;
    case ShardingStrategy::kHybridShard:
      if (f == 0) {
        return absl::InvalidArgumentError(
            "sharding_factor is required for HYBRID_SHARD (the size of each "
            "shard group)");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("strategy: unknown value ", static_cast<int>(strategy)));
  }
  if (f > world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharding_factor (", f, ") must not exceed world_size (",
                     world_size, ") for ", name));
  }
  if (world_size % f != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sharding_factor (", f,
                                                   ") must divide world_size (",
                                                   world_size, ") for ", name));
  }
  return ShardPlan(world_size, f, strategy);
}

bool ShardPlan::reshard_after_forward() const {
  return strategy_ == ShardingStrategy::kFullShard ||
         strategy_ == ShardingStrategy::kHybridShard;
}

absl::StatusOr<RankPlacement> ShardPlan::Placement(int64_t rank) const {
  if (rank < 0 || rank >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank (", rank, ") must be in [0, ", world_size_, ")"));
  }
  RankPlacement p;
  p.rank = rank;
  p.shard_group = rank / sharding_factor_;
  p.shard_index = rank % sharding_factor_;
  for (int64_t i = 0; i < sharding_factor_; ++i) {
    p.shard_group_ranks.push_back(p.shard_group * sharding_factor_ + i);
  }
  for (int64_t g = 0; g < num_replicas(); ++g) {
    p.replica_group_ranks.push_back(g * sharding_factor_ + p.shard_index);
  }
  return p;
}

absl::StatusOr<std::vector<int64_t>> ShardPlan::ReplicasOf(
    int64_t shard_index) const {
  if (shard_index < 0 || shard_index >= sharding_factor_) {
    return absl::InvalidArgumentError(absl::StrCat("shard_index (", shard_index,
                                                   ") must be in [0, ",
                                                   sharding_factor_, ")"));
  }
  std::vector<int64_t> ranks;
  for (int64_t g = 0; g < num_replicas(); ++g) {
    ranks.push_back(g * sharding_factor_ + shard_index);
  }
  return ranks;
}

}  // namespace shardd::core
