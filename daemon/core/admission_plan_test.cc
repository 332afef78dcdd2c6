#include "daemon/core/admission_plan.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

UnitLayout Layout(const std::string& name, std::vector<int64_t> shape,
                  int64_t f, DType dtype = DType::kFloat32) {
  absl::StatusOr<UnitLayout> layout =
      UnitLayout::Create(UnitSpec{name, {TensorSpec{"w", shape, dtype}}}, f);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

ShardPlan Plan(int64_t w, ShardingStrategy s, int64_t f) {
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(w, s, f);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

int64_t Bytes(const AdmissionPlan& plan, const std::string& category) {
  for (const PlannedBytes& item : plan.items()) {
    if (item.category == category) return item.bytes;
  }
  ADD_FAILURE() << "no category " << category;
  return -1;
}

MemoryPlacement Where(const AdmissionPlan& plan, const std::string& category) {
  for (const PlannedBytes& item : plan.items()) {
    if (item.category == category) return item.placement;
  }
  ADD_FAILURE() << "no category " << category;
  return MemoryPlacement::kHost;
}

TEST(AdmissionPlanTest, IssueModelOnOneCpuRankNeedsAbout272GiB) {
  // 4 units of one 65536 x 65536 fp32 weight, W = 1 NO_SHARD, AdamW.
  std::vector<UnitLayout> units;
  for (int u = 0; u < 4; ++u) {
    units.push_back(Layout("l" + std::to_string(u), {65536, 65536}, 1));
  }
  absl::StatusOr<AdmissionPlan> plan =
      AdmissionPlan::ForEngine(units, Plan(1, ShardingStrategy::kNoShard, 1), 0,
                               MemoryOptions{}, /*device_memory=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Bytes(*plan, "parameter shards"), 64 * kGiB);
  EXPECT_EQ(Where(*plan, "parameter shards"), MemoryPlacement::kSharedHost);
  EXPECT_EQ(Bytes(*plan, "gradient shards"), 64 * kGiB);
  EXPECT_EQ(Bytes(*plan, "optimizer state"), 128 * kGiB);
  EXPECT_EQ(Bytes(*plan, "gathered slots"), 0);
  EXPECT_EQ(Bytes(*plan, "gradient slot"), 16 * kGiB);
  EXPECT_EQ(Bytes(*plan, "communicator scratch"), 0);
  EXPECT_EQ(Bytes(*plan, "staging"), kStagingBytes);
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kSharedHost), 80 * kGiB);
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kHost), 192 * kGiB + kStagingBytes);
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kDevice), 0);
  EXPECT_EQ(plan->engine_breakdown().total_bytes, 272 * kGiB);
  EXPECT_NE(plan->Describe().find("parameter shards 64.00 GiB (shm)"),
            std::string::npos)
      << plan->Describe();
}

TEST(AdmissionPlanTest, ShardedHostPlanPutsOnlyTrainerMappedBuffersInShm) {
  const std::vector<UnitLayout> units = {Layout("a", {10}, 2),
                                         Layout("b", {4}, 2)};
  absl::StatusOr<AdmissionPlan> plan =
      AdmissionPlan::ForEngine(units, Plan(2, ShardingStrategy::kFullShard, 2),
                               1, MemoryOptions{}, false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Where(*plan, "parameter shards"), MemoryPlacement::kHost);
  EXPECT_EQ(Where(*plan, "gathered slots"), MemoryPlacement::kSharedHost);
  EXPECT_EQ(Where(*plan, "gradient slot"), MemoryPlacement::kSharedHost);
  // One slot (K = 1) of the largest unit, one gradient slot of it.
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kSharedHost), 40 + 40);
  // Every engine category equals MemoryPlan's, to the byte.
  const MemoryBreakdown& m = plan->engine_breakdown();
  EXPECT_EQ(Bytes(*plan, "parameter shards"), m.parameter_shard_bytes);
  EXPECT_EQ(Bytes(*plan, "gradient shards"), m.gradient_shard_bytes);
  EXPECT_EQ(Bytes(*plan, "optimizer state"), m.optimizer_state_bytes);
}

TEST(AdmissionPlanTest, DeviceMemoryPlanKeepsOnlyStagingOnTheHost) {
  const std::vector<UnitLayout> units = {Layout("a", {1000}, 2)};
  absl::StatusOr<AdmissionPlan> plan = AdmissionPlan::ForEngine(
      units, Plan(4, ShardingStrategy::kHybridShard, 2), 0, MemoryOptions{},
      /*device_memory=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kHost), kStagingBytes);
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kSharedHost), 0);
  EXPECT_EQ(plan->BytesIn(MemoryPlacement::kDevice),
            plan->engine_breakdown().total_bytes +
                Bytes(*plan, "communicator scratch"));
}

TEST(AdmissionPlanTest, CommunicatorScratchFollowsGroupSizesAndReduceDtype) {
  // F = 2, W = 4: shards of 5 elements. Shard group: 1 block of 5 fp32;
  // replica group (2): 1 block of ceil(5 / 2) = 3 fp32.
  const std::vector<UnitLayout> units = {Layout("a", {10}, 2)};
  const ShardPlan plan = Plan(4, ShardingStrategy::kHybridShard, 2);
  EXPECT_EQ(CommunicatorScratchBytes(units, plan, 0, DType::kFloat32),
            5 * 4 + 3 * 4);
  // bf16 reductions add fp32 copies of the input (10) and output (5).
  EXPECT_EQ(CommunicatorScratchBytes(units, plan, 0, DType::kBFloat16),
            5 * 4 + 3 * 4 + 15 * 4);
  EXPECT_EQ(
      CommunicatorScratchBytes(units, Plan(1, ShardingStrategy::kNoShard, 1), 0,
                               DType::kFloat32),
      0);
}

TEST(AdmissionPlanTest, ExportStagesTheShardOrOnRankZeroTheWholeModel) {
  const std::vector<UnitLayout> units = {Layout("a", {10}, 2),
                                         Layout("b", {3}, 2)};  // 4 padded.
  // The writer streams: SHARDED, parameters + two AdamW states, holds the
  // largest shard copied out (5 elements) and nothing of the others.
  AdmissionPlan sharded = AdmissionPlan::ForExport(units, 0, false, true, 2,
                                                   /*device_memory=*/false);
  EXPECT_EQ(sharded.total_bytes(), 5 * 4);
  // FULL on rank 0, which writes: one gathered unit, not the model.
  AdmissionPlan writer =
      AdmissionPlan::ForExport(units, 0, true, true, 2, false);
  EXPECT_EQ(writer.total_bytes(), 10 * 4);
  AdmissionPlan other =
      AdmissionPlan::ForExport(units, 1, true, false, 0, true);
  EXPECT_EQ(other.BytesIn(MemoryPlacement::kHost), 10 * 4);
  EXPECT_EQ(other.BytesIn(MemoryPlacement::kDevice), 10 * 4);
}

TEST(AdmissionPlanTest, TotalsSaturateInsteadOfWrapping) {
  AdmissionPlan plan = AdmissionPlan::ForGrowth(
      "a", std::numeric_limits<int64_t>::max(), MemoryPlacement::kHost);
  plan.Add("b", 1, MemoryPlacement::kHost);
  EXPECT_EQ(plan.total_bytes(), std::numeric_limits<int64_t>::max());
}

TEST(AdmissionPlanTest, FormatBytesUsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 20), "1.00 MiB");
  EXPECT_EQ(FormatBytes(64 * kGiB), "64.00 GiB");
}

}  // namespace
}  // namespace shardd::core
