#ifndef SHARDD_DAEMON_CORE_SHARD_PLAN_H_
#define SHARDD_DAEMON_CORE_SHARD_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::core {

// FSDP's sharding strategies.
enum class ShardingStrategy : int {
  // ZeRO-3 over all W ranks (F = W); parameters resharded after forward.
  kFullShard = 1,
  // ZeRO-2: parameters stay gathered from forward to backward; gradients and
  // optimizer state sharded over F ranks (F = W by default, or any divisor
  // of W for the hybrid ZeRO-2 variant).
  kShardGradOp = 2,
  // DDP (F = 1): every rank holds everything; gradients all-reduced.
  kNoShard = 3,
  // HSDP: shard within groups of F ranks, replicate across the W/F groups.
  kHybridShard = 4,
};

absl::string_view ShardingStrategyName(ShardingStrategy strategy);

// Where one rank sits in the plan.
struct RankPlacement {
  int64_t rank = 0;
  // g = rank / F: which replica of the model this rank's group holds.
  int64_t shard_group = 0;
  // i = rank mod F: which shard of every unit this rank holds.
  int64_t shard_index = 0;
  // The F ranks [g*F, (g+1)*F) that all-gather and reduce-scatter together.
  std::vector<int64_t> shard_group_ranks;
  // The W/F ranks holding shard i (rank mod F = i) that all-reduce gradient
  // shards together and can rebuild each other after a failure.
  std::vector<int64_t> replica_group_ranks;
};

// How W ranks split into shard groups and replica groups for a strategy.
//
// Responsible for validating (W, F, strategy) and answering which ranks
// gather together, which ranks hold copies of a shard, and whether a lost
// shard can be rebuilt from a replica (W/F >= 2). Immutable after Create,
// hence thread-safe.
class ShardPlan {
 public:
  // sharding_factor 0 means "the strategy's default" (W for FULL_SHARD and
  // SHARD_GRAD_OP, 1 for NO_SHARD; HYBRID_SHARD has none and requires it).
  // Errors are INVALID_ARGUMENT naming the field: world_size < 1,
  // sharding_factor > world_size, not dividing it, or contradicting the
  // strategy, an unknown strategy.
  static absl::StatusOr<ShardPlan> Create(int64_t world_size,
                                          ShardingStrategy strategy,
                                          int64_t sharding_factor = 0);

  int64_t world_size() const { return world_size_; }
  int64_t sharding_factor() const { return sharding_factor_; }
  ShardingStrategy strategy() const { return strategy_; }
  // W / F: how many copies of every shard exist.
  int64_t num_replicas() const { return world_size_ / sharding_factor_; }
  // True when every shard exists on >= 2 ranks, so a lost rank's shard can
  // be copied from a live replica instead of read from a checkpoint.
  bool has_replica() const { return num_replicas() >= 2; }
  // FULL_SHARD and HYBRID_SHARD free gathered parameters after forward and
  // gather again for backward; SHARD_GRAD_OP keeps them until backward.
  bool reshard_after_forward() const;

  // INVALID_ARGUMENT if rank is outside [0, W).
  absl::StatusOr<RankPlacement> Placement(int64_t rank) const;
  // The ranks that hold shard `shard_index` (rank mod F = shard_index).
  absl::StatusOr<std::vector<int64_t>> ReplicasOf(int64_t shard_index) const;

 private:
  ShardPlan(int64_t world_size, int64_t sharding_factor,
            ShardingStrategy strategy)
      : world_size_(world_size),
        sharding_factor_(sharding_factor),
        strategy_(strategy) {}

  int64_t world_size_;
  int64_t sharding_factor_;
  ShardingStrategy strategy_;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_SHARD_PLAN_H_
