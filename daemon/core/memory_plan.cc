#include "daemon/core/memory_plan.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/checked_math.h"

namespace shardd::core {
namespace {

// Accumulates byte counts, remembering whether any step overflowed so the
// caller checks once at the end.
class ByteSum {
 public:
  void Add(int64_t elements, int64_t bytes_per_element) {
    const std::optional<int64_t> bytes =
        CheckedMul(elements, bytes_per_element);
    const std::optional<int64_t> sum =
        bytes ? CheckedAdd(value_, *bytes) : std::nullopt;
    if (!sum) {
      overflow_ = true;
      return;
    }
    value_ = *sum;
  }
  int64_t value() const { return value_; }
  bool overflow() const { return overflow_; }

 private:
  int64_t value_ = 0;
  bool overflow_ = false;
};

// The largest scratch any engine operation needs on one communicator: the
// formulas of comm/nccl/nccl_plan.cc for the operations StepEngine issues
// (a reduce-scatter per unit on the shard group; an fp32 all-reduce of
// each gradient shard on the replica group; all-gathers, sends and
// receives need none; a barrier 4 bytes).
struct CommScratchFigures {
  int64_t shard = 0;
  int64_t replica = 0;
};

CommScratchFigures CommScratchFor(const std::vector<UnitLayout>& units,
                                  CommScratch kind, DType reduce_dtype,
                                  int64_t f, int64_t replicas,
                                  const RankPlacement& placement) {
  CommScratchFigures out;
  if (kind == CommScratch::kNone) return out;
  constexpr int64_t kF32 = 4;
  const bool upcast = reduce_dtype != DType::kFloat32;
  const bool fixed = kind == CommScratch::kNcclFixedOrder;
  const int64_t replica_rank = placement.shard_group;
  out.shard = out.replica = 4;  // a barrier's all-reduce of one float
  for (const UnitLayout& unit : units) {
    const int64_t total = unit.padded_numel();
    const int64_t mine = unit.shard(placement.shard_index).stored();
    if (f > 1 && total > 0) {
      int64_t bytes = upcast ? total * kF32 : 0;
      if (fixed) bytes += (f - 1) * mine * kF32;
      out.shard = std::max(out.shard, bytes);
    }
    if (replicas > 1 && fixed && mine > 0) {
      const int64_t block =
          mine / replicas + (replica_rank < mine % replicas ? 1 : 0);
      out.replica = std::max(out.replica, (replicas - 1) * block * kF32);
    }
  }
  return out;
}

}  // namespace

int64_t OptimizerStateBytesPerElement(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kSgdMomentum:
      return 4;
    case OptimizerKind::kAdamW:
      return 8;
  }
  return -1;
}

int64_t GradientSlotCount(int64_t sharding_factor, int64_t units,
                          int64_t max_reducing_units) {
  if (sharding_factor <= 1) return 1;
  return std::max<int64_t>(1, std::min(units, max_reducing_units));
}

absl::StatusOr<MemoryBreakdown> MemoryPlan::ForRank(
    const std::vector<UnitLayout>& units, const ShardPlan& plan, int64_t rank,
    const MemoryOptions& options) {
  if (units.empty()) {
    return absl::InvalidArgumentError("units: the model has no units");
  }
  const int64_t state_per_element =
      OptimizerStateBytesPerElement(options.optimizer);
  if (state_per_element < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer: unknown value ", static_cast<int>(options.optimizer)));
  }
  if (!IsValidDType(options.reduce_dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce_dtype: unsupported value ",
                     static_cast<int>(options.reduce_dtype)));
  }
  if (options.max_reducing_units < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_reducing_units must be >= 1, got ", options.max_reducing_units));
  }
  if (options.max_gathered_units < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_gathered_units must be >= 1, got ", options.max_gathered_units));
  }
  absl::StatusOr<RankPlacement> placement = plan.Placement(rank);
  if (!placement.ok()) return placement.status();
  const int64_t f = plan.sharding_factor();

  ByteSum master, lowp, grad, state, padding, gathered, unsharded_grad;
  int64_t largest_gathered_bytes = 0;
  int64_t largest_grad_elements = 0;
  for (const UnitLayout& unit : units) {
    if (unit.sharding_factor() != f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit '", unit.name(), "': laid out for sharding_factor ",
          unit.sharding_factor(), ", but the plan has ", f));
    }
    const ShardRange& shard = unit.shard(placement->shard_index);
    const int64_t lowp_size =
        unit.dtype() == DType::kFloat32 ? 0 : DTypeSize(unit.dtype());
    master.Add(shard.stored(), 4);
    lowp.Add(shard.stored(), lowp_size);
    grad.Add(shard.stored(), 4);
    state.Add(shard.stored(), state_per_element);
    padding.Add(shard.padding, 4 + lowp_size + 4 + state_per_element);
    if (plan.strategy() == ShardingStrategy::kShardGradOp && f > 1) {
      gathered.Add(unit.padded_numel(), DTypeSize(unit.dtype()));
    }
    largest_gathered_bytes =
        std::max(largest_gathered_bytes, unit.padded_bytes());
    largest_grad_elements =
        std::max(largest_grad_elements, unit.padded_numel());
  }
  if (f > 1 && plan.strategy() != ShardingStrategy::kShardGradOp) {
    const int64_t slots = std::min<int64_t>(options.max_gathered_units,
                                            static_cast<int64_t>(units.size()));
    gathered.Add(slots, largest_gathered_bytes);
  }
  unsharded_grad.Add(GradientSlotCount(f, static_cast<int64_t>(units.size()),
                                       options.max_reducing_units) *
                         largest_grad_elements,
                     DTypeSize(options.reduce_dtype));
  if (options.comm_scratch != CommScratch::kNone &&
      options.comm_scratch != CommScratch::kNcclFixedOrder &&
      options.comm_scratch != CommScratch::kNcclNative) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm_scratch: unknown value ",
                     static_cast<int>(options.comm_scratch)));
  }
  const CommScratchFigures scratch =
      CommScratchFor(units, options.comm_scratch, options.reduce_dtype, f,
                     plan.world_size() / f, *placement);

  MemoryBreakdown out;
  out.parameter_shard_bytes = master.value();
  out.lowp_parameter_shard_bytes = lowp.value();
  out.gradient_shard_bytes = grad.value();
  out.optimizer_state_bytes = state.value();
  out.gathered_parameter_bytes = gathered.value();
  out.unsharded_gradient_bytes = unsharded_grad.value();
  out.shard_padding_bytes = padding.value();
  out.shard_comm_scratch_bytes = scratch.shard;
  out.replica_comm_scratch_bytes = scratch.replica;
  ByteSum comm_scratch;
  comm_scratch.Add(scratch.shard, 1);
  comm_scratch.Add(scratch.replica, 1);
  out.comm_scratch_bytes = comm_scratch.value();
  ByteSum peak, total;
  peak.Add(out.parameter_shard_bytes, 1);
  peak.Add(out.lowp_parameter_shard_bytes, 1);
  peak.Add(out.gathered_parameter_bytes, 1);
  total.Add(peak.value(), 1);
  total.Add(out.gradient_shard_bytes, 1);
  total.Add(out.optimizer_state_bytes, 1);
  total.Add(out.unsharded_gradient_bytes, 1);
  total.Add(out.comm_scratch_bytes, 1);
  for (const ByteSum* s : {&master, &lowp, &grad, &state, &padding, &gathered,
                           &unsharded_grad, &comm_scratch, &peak, &total}) {
    if (s->overflow()) {
      return absl::InvalidArgumentError(
          "units: memory for this rank overflows 64-bit byte counts");
    }
  }
  out.peak_parameter_bytes = peak.value();
  out.total_bytes = total.value();
  return out;
}

}  // namespace shardd::core
