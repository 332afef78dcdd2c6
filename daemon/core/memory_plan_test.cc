#include "daemon/core/memory_plan.h"

#include <algorithm>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

UnitLayout Layout(const std::string& name, std::vector<int64_t> sizes,
                  int64_t f, DType dtype = DType::kFloat32,
                  AlignmentSpec alignment = {}) {
  UnitSpec spec{name, {}};
  for (size_t i = 0; i < sizes.size(); ++i) {
    spec.tensors.push_back(
        TensorSpec{"t" + std::to_string(i), {sizes[i]}, dtype});
  }
  absl::StatusOr<UnitLayout> layout = UnitLayout::Create(spec, f, alignment);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

ShardPlan Plan(int64_t w, ShardingStrategy s, int64_t f = 0) {
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(w, s, f);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(MemoryPlanTest, PeakParameterBytesIsTheFormulaToTheByte) {
  // ψ (fp32 bytes): 4000, 12000 (the largest), 40 (padded from 10 to 12).
  const std::vector<UnitLayout> units = {Layout("a", {1000}, 4),
                                         Layout("b", {1000, 2000}, 4),
                                         Layout("c", {10}, 4)};
  const int64_t sum_psi = 4 * (1000 + 3000 + 10);
  const int64_t max_psi = 4 * 3000;
  const int64_t padding_bytes = 4 * 2 / 4;  // 2 padding elements over F = 4.
  for (int64_t rank = 0; rank < 4; ++rank) {
    auto m = MemoryPlan::ForRank(units, Plan(4, ShardingStrategy::kFullShard),
                                 rank, {});
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->peak_parameter_bytes, sum_psi / 4 + max_psi + padding_bytes);
  }
}

TEST(MemoryPlanTest, PeakMatchesFormulaForRandomModels) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t f = 1 << (rng() % 4);
    const int64_t w = f * (1 + rng() % 3);
    std::vector<UnitLayout> units;
    int64_t sum_padded = 0, max_padded = 0;
    for (int u = 0; u < 1 + static_cast<int>(rng() % 6); ++u) {
      units.push_back(Layout("u" + std::to_string(u),
                             {static_cast<int64_t>(1 + rng() % 5000)}, f));
      sum_padded += units.back().padded_bytes();
      max_padded = std::max(max_padded, units.back().padded_bytes());
    }
    auto m = MemoryPlan::ForRank(
        units, Plan(w, ShardingStrategy::kHybridShard, f), rng() % w, {});
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->peak_parameter_bytes,
              sum_padded / f + (f > 1 ? max_padded : 0));
  }
}

TEST(MemoryPlanTest, AdamWCategoriesForFp32Units) {
  const std::vector<UnitLayout> units = {Layout("a", {8}, 2),
                                         Layout("b", {5}, 2)};  // 6 padded.
  MemoryOptions options;
  options.reduce_dtype = DType::kBFloat16;
  auto m = MemoryPlan::ForRank(
      units, Plan(4, ShardingStrategy::kHybridShard, 2), 3, options);
  ASSERT_TRUE(m.ok());
  const int64_t stored = 4 + 3;  // This rank's elements, padding included.
  EXPECT_EQ(m->parameter_shard_bytes, stored * 4);
  EXPECT_EQ(m->lowp_parameter_shard_bytes, 0);
  EXPECT_EQ(m->gradient_shard_bytes, stored * 4);
  EXPECT_EQ(m->optimizer_state_bytes, stored * 8);
  EXPECT_EQ(m->gathered_parameter_bytes, 8 * 4);
  EXPECT_EQ(m->unsharded_gradient_bytes, 8 * 2);
  EXPECT_EQ(m->shard_padding_bytes, 1 * (4 + 4 + 8));  // Shard 1 of unit b.
  EXPECT_EQ(m->total_bytes, stored * 16 + 32 + 16);
}

TEST(MemoryPlanTest, GradientSlotsAreGWhenShardedAndOneOtherwise) {
  EXPECT_EQ(GradientSlotCount(/*sharding_factor=*/4, /*units=*/8, 2), 2);
  EXPECT_EQ(GradientSlotCount(4, 8, 1), 1);
  EXPECT_EQ(GradientSlotCount(4, /*units=*/1, 2), 1);  // One per unit at most.
  EXPECT_EQ(GradientSlotCount(/*sharding_factor=*/1, 8, 2), 1);
  const std::vector<UnitLayout> units = {Layout("a", {8}, 2),
                                         Layout("b", {5}, 2)};
  MemoryOptions options;
  options.max_reducing_units = 2;
  auto two = MemoryPlan::ForRank(
      units, Plan(4, ShardingStrategy::kHybridShard, 2), 0, options);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->unsharded_gradient_bytes, 2 * 8 * 4);
  options.max_reducing_units = 0;
  EXPECT_EQ(MemoryPlan::ForRank(
                units, Plan(4, ShardingStrategy::kHybridShard, 2), 0, options)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MemoryPlanTest, LowPrecisionUnitsKeepAnFp32MasterAndAGatherCopy) {
  const std::vector<UnitLayout> units = {
      Layout("a", {16}, 4, DType::kBFloat16)};
  MemoryOptions options;
  options.optimizer = OptimizerKind::kSgdMomentum;
  auto m = MemoryPlan::ForRank(units, Plan(4, ShardingStrategy::kFullShard), 0,
                               options);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->parameter_shard_bytes, 16);
  EXPECT_EQ(m->lowp_parameter_shard_bytes, 8);
  EXPECT_EQ(m->optimizer_state_bytes, 16);
  EXPECT_EQ(m->gathered_parameter_bytes, 32);
  EXPECT_EQ(m->peak_parameter_bytes, 16 + 8 + 32);
}

TEST(MemoryPlanTest, PrefetchAddsGatheredSlotsUpToTheUnitCount) {
  const std::vector<UnitLayout> units = {Layout("a", {100}, 2),
                                         Layout("b", {40}, 2)};
  MemoryOptions options;
  options.max_gathered_units = 2;
  auto two = MemoryPlan::ForRank(units, Plan(2, ShardingStrategy::kFullShard),
                                 0, options);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->gathered_parameter_bytes, 2 * 400);
  options.max_gathered_units = 5;
  auto five = MemoryPlan::ForRank(units, Plan(2, ShardingStrategy::kFullShard),
                                  0, options);
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->gathered_parameter_bytes, 2 * 400);
}

TEST(MemoryPlanTest, ShardGradOpHoldsEveryUnitGathered) {
  const std::vector<UnitLayout> units = {Layout("a", {100}, 2),
                                         Layout("b", {40}, 2)};
  auto m = MemoryPlan::ForRank(units, Plan(2, ShardingStrategy::kShardGradOp),
                               1, {});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->gathered_parameter_bytes, 400 + 160);
}

TEST(MemoryPlanTest, NoShardGathersNothing) {
  const std::vector<UnitLayout> units = {Layout("a", {100}, 1)};
  MemoryOptions options;
  options.optimizer = OptimizerKind::kSgd;
  auto m = MemoryPlan::ForRank(units, Plan(4, ShardingStrategy::kNoShard), 2,
                               options);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->parameter_shard_bytes, 400);
  EXPECT_EQ(m->gathered_parameter_bytes, 0);
  EXPECT_EQ(m->optimizer_state_bytes, 0);
  EXPECT_EQ(m->peak_parameter_bytes, 400);
}

TEST(MemoryPlanTest, UnevenShardsAreAccountedPerRankAndAddUp) {
  const AlignmentSpec whole{AlignmentMode::kWholeTensor, 0};
  const std::vector<UnitLayout> units = {
      Layout("a", {300, 100, 100}, 2, DType::kFloat32, whole)};
  int64_t sum = 0;
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto m = MemoryPlan::ForRank(units, Plan(2, ShardingStrategy::kFullShard),
                                 rank, {});
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->parameter_shard_bytes, 4 * units[0].shard(rank).numel);
    EXPECT_EQ(m->shard_padding_bytes, 0);
    sum += m->parameter_shard_bytes;
  }
  EXPECT_EQ(sum, 4 * 500);
}

TEST(MemoryPlanTest, RejectsInvalidInputNamingTheField) {
  const std::vector<UnitLayout> units = {Layout("a", {10}, 2)};
  const ShardPlan plan = Plan(4, ShardingStrategy::kHybridShard, 2);
  auto expect = [](const absl::StatusOr<MemoryBreakdown>& m,
                   absl::string_view field) {
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(std::string(field)), std::string::npos)
        << m.status().message();
  };
  expect(MemoryPlan::ForRank({}, plan, 0, {}), "units");
  expect(MemoryPlan::ForRank({Layout("x", {10}, 4)}, plan, 0, {}),
         "unit 'x': laid out for sharding_factor 4");
  expect(MemoryPlan::ForRank(units, plan, 4, {}), "rank");
  MemoryOptions options;
  options.max_gathered_units = 0;
  expect(MemoryPlan::ForRank(units, plan, 0, options), "max_gathered_units");
  options = {};
  options.optimizer = static_cast<OptimizerKind>(0);
  expect(MemoryPlan::ForRank(units, plan, 0, options), "optimizer");
  options = {};
  options.reduce_dtype = static_cast<DType>(0);
  expect(MemoryPlan::ForRank(units, plan, 0, options), "reduce_dtype");
}

TEST(MemoryPlanTest, RejectsTotalsOverflowing64Bits) {
  // 2^60 fp32 elements are representable alone (2^62 bytes), but master +
  // gradient + AdamW state on one rank are not.
  const std::vector<UnitLayout> units = {Layout("huge", {int64_t{1} << 60}, 1)};
  auto m =
      MemoryPlan::ForRank(units, Plan(1, ShardingStrategy::kNoShard), 0, {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("overflows"), std::string::npos);
}

}  // namespace
}  // namespace shardd::core
