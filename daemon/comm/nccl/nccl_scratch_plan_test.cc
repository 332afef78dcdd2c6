// core::MemoryPlan counts the device scratch of the NCCL communicators
// (MemoryBreakdown::*_comm_scratch_bytes) so that it is reserved when the
// engine gets its communicators and admitted with the rest of the plan.
// Its figures must be exactly the largest scratch_bytes of the plans of
// the operations StepEngine issues; this test builds those plans.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using core::DType;

core::UnitLayout Layout(const std::string& name, int64_t numel, int64_t f,
                        DType dtype) {
  core::UnitSpec spec{name, {}};
  spec.tensors.push_back(core::TensorSpec{"w", {numel}, dtype});
  absl::StatusOr<core::UnitLayout> layout =
      core::UnitLayout::Create(spec, f, {});
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// The largest scratch of the engine's operations on each communicator of
// `rank`, from the NCCL plans themselves.
std::pair<int64_t, int64_t> FromPlans(
    const std::vector<core::UnitLayout>& units, int64_t w, int64_t f,
    int64_t rank, DType reduce_dtype, ReductionOrder order) {
  const GroupShape shard{static_cast<int>(rank % f), static_cast<int>(f)};
  const GroupShape replica{static_cast<int>(rank / f), static_cast<int>(w / f)};
  int64_t s = PlanBarrier(shard)->scratch_bytes;
  int64_t r = PlanBarrier(replica)->scratch_bytes;
  for (const core::UnitLayout& unit : units) {
    std::vector<int64_t> counts;
    for (const core::ShardRange& range : unit.shards()) {
      counts.push_back(range.stored());
    }
    // Gathers of parameters, of state, of the norm's partials: no scratch.
    EXPECT_EQ(PlanAllGather(shard, counts, unit.dtype())->scratch_bytes, 0);
    if (f > 1) {
      absl::StatusOr<NcclPlan> rs = PlanReduceScatter(
          shard, counts, reduce_dtype, ReduceOp::kAverage, order);
      EXPECT_TRUE(rs.ok()) << rs.status();
      s = std::max(s, rs->scratch_bytes);
    }
    if (w / f > 1) {
      absl::StatusOr<NcclPlan> ar =
          PlanAllReduce(replica, counts[rank % f], DType::kFloat32,
                        ReduceOp::kAverage, order);
      EXPECT_TRUE(ar.ok()) << ar.status();
      r = std::max(r, ar->scratch_bytes);
    }
  }
  return {s, r};
}

TEST(NcclScratchPlanTest, MemoryPlanReservesWhatTheEnginesOperationsNeed) {
  std::mt19937_64 rng(28);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t f = 1 << (rng() % 4);
    const int64_t w = f * (1 + rng() % 4);
    const DType dtype = std::vector<DType>{DType::kFloat32, DType::kBFloat16,
                                           DType::kFloat16}[rng() % 3];
    const DType reduce = rng() % 2 == 0 ? DType::kFloat32 : dtype;
    const ReductionOrder order =
        rng() % 2 == 0 ? ReductionOrder::kFixed : ReductionOrder::kNccl;
    std::vector<core::UnitLayout> units;
    for (int u = 0; u < 1 + static_cast<int>(rng() % 5); ++u) {
      units.push_back(Layout("u" + std::to_string(u),
                             static_cast<int64_t>(1 + rng() % 20000), f,
                             dtype));
    }
    absl::StatusOr<core::ShardPlan> plan =
        core::ShardPlan::Create(w, core::ShardingStrategy::kHybridShard, f);
    ASSERT_TRUE(plan.ok()) << plan.status();
    core::MemoryOptions options;
    options.reduce_dtype = reduce;
    options.comm_scratch = order == ReductionOrder::kFixed
                               ? core::CommScratch::kNcclFixedOrder
                               : core::CommScratch::kNcclNative;
    for (int64_t rank = 0; rank < w; ++rank) {
      absl::StatusOr<core::MemoryBreakdown> m =
          core::MemoryPlan::ForRank(units, *plan, rank, options);
      ASSERT_TRUE(m.ok()) << m.status();
      const auto [shard, replica] = FromPlans(units, w, f, rank, reduce, order);
      SCOPED_TRACE(testing::Message()
                   << "W=" << w << " F=" << f << " rank " << rank << " reduce "
                   << core::DTypeName(reduce) << " order "
                   << ReductionOrderName(order));
      EXPECT_EQ(m->shard_comm_scratch_bytes, shard);
      EXPECT_EQ(m->replica_comm_scratch_bytes, replica);
      EXPECT_EQ(m->comm_scratch_bytes, shard + replica);
    }
  }
}

TEST(NcclScratchPlanTest, GlooKeepsNoDeviceScratch) {
  absl::StatusOr<core::ShardPlan> plan =
      core::ShardPlan::Create(4, core::ShardingStrategy::kHybridShard, 2);
  ASSERT_TRUE(plan.ok());
  core::MemoryOptions options;
  options.reduce_dtype = DType::kBFloat16;
  absl::StatusOr<core::MemoryBreakdown> m = core::MemoryPlan::ForRank(
      {Layout("u", 1000, 2, DType::kBFloat16)}, *plan, 1, options);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->comm_scratch_bytes, 0);
  EXPECT_EQ(m->shard_comm_scratch_bytes, 0);
}

}  // namespace
}  // namespace shardd::comm::nccl
