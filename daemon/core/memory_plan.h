#ifndef SHARDD_DAEMON_CORE_MEMORY_PLAN_H_
#define SHARDD_DAEMON_CORE_MEMORY_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/dtype.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"

namespace shardd::core {

enum class OptimizerKind : int {
  kSgd = 1,          // No state.
  kSgdMomentum = 2,  // One fp32 momentum buffer.
  kAdamW = 3,        // Two fp32 moments.
};

// fp32 state bytes the optimizer keeps per parameter element.
int64_t OptimizerStateBytesPerElement(OptimizerKind kind);

// Device scratch the communicators keep for the engine's reductions, by
// how they reduce. NCCL reduces 16-bit inputs in an fp32 copy and, in the
// fixed order, adds the other ranks' blocks in slots (comm/nccl/nccl_plan.h
// has the plans; nccl_plan_test checks these figures against them). Gloo
// reduces in host buffers of its own and keeps none.
enum class CommScratch : int {
  kNone = 0,            // Gloo (CPU)
  kNcclFixedOrder = 1,  // NCCL, ReductionOrder::kFixed
  kNcclNative = 2,      // NCCL, ReductionOrder::kNccl
};

struct MemoryOptions {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  // dtype of the unsharded gradient the trainer hands over for reduction.
  DType reduce_dtype = DType::kFloat32;
  // Units gathered at once (FSDP's all-gather rate limit; 1 = no prefetch,
  // 2 = the next unit is prefetched while the current one is in use).
  int64_t max_gathered_units = 1;
  // Units whose gradient may be reduced at once (GradientSlotCount).
  int64_t max_reducing_units = 1;
  CommScratch comm_scratch = CommScratch::kNone;
};

// The gradient slots a rank keeps: with F > 1, one per unit whose
// reduce-scatter may be in flight while the trainer writes the next unit's
// gradient (at most one per unit); with F = 1 one (ReduceGrad copies the
// slot into the gradient shard before it returns).
int64_t GradientSlotCount(int64_t sharding_factor, int64_t units,
                          int64_t max_reducing_units);

// Bytes a rank holds, by category. Every figure is what the daemon
// allocates, so the daemon's resident buffers must add up to `total_bytes`
// exactly.
struct MemoryBreakdown {
  // fp32 master copy of this rank's parameter shards (padding included).
  int64_t parameter_shard_bytes = 0;
  // bf16/fp16 copies of the shards, produced by the optimizer for gathering;
  // 0 when units are fp32 (the master copy is gathered directly).
  int64_t lowp_parameter_shard_bytes = 0;
  // fp32 gradient shards (reduce-scatter output, accumulated across
  // micro-batches).
  int64_t gradient_shard_bytes = 0;
  // Optimizer state of the shards (fp32).
  int64_t optimizer_state_bytes = 0;
  // Buffers gathered parameters land in: max_gathered_units slots sized for
  // the largest unit (all units for SHARD_GRAD_OP, which keeps them from
  // forward to backward; none when F = 1, where a shard is the whole unit).
  int64_t gathered_parameter_bytes = 0;
  // GradientSlotCount slots, each sized for the largest unit in the reduce
  // dtype, that the trainer writes a unit's full gradient into before it
  // is reduced (one allocation).
  int64_t unsharded_gradient_bytes = 0;
  // Device scratch of the shard group's and the replica group's
  // communicators (reserved when the communicators are given to the
  // engine, so that no collective allocates), and their sum. 0 on the CPU.
  int64_t shard_comm_scratch_bytes = 0;
  int64_t replica_comm_scratch_bytes = 0;
  int64_t comm_scratch_bytes = 0;
  // Of the shard categories above, the bytes that are layout padding.
  int64_t shard_padding_bytes = 0;
  // parameter_shard + lowp_parameter_shard + gathered_parameter: with fp32
  // units and one unit gathered at a time this is Σψᵢ/F + maxᵢψᵢ plus the
  // layout's padding.
  int64_t peak_parameter_bytes = 0;
  int64_t total_bytes = 0;
};

// Memory accounting for one rank of a plan.
//
// A pure function object: stateless and thread-safe. Inputs are borrowed for
// the call only.
class MemoryPlan {
 public:
  // `units` must all be laid out for plan.sharding_factor(). Errors are
  // INVALID_ARGUMENT naming the field: no units, a unit laid out for another
  // F, rank outside the plan, max_gathered_units < 1, an unknown optimizer or
  // reduce dtype, a total that overflows 64 bits.
  static absl::StatusOr<MemoryBreakdown> ForRank(
      const std::vector<UnitLayout>& units, const ShardPlan& plan, int64_t rank,
      const MemoryOptions& options);
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_MEMORY_PLAN_H_
