#include "daemon/node/engine_admission.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/memory/byte_buffer.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// `units` units of one [rows, cols] fp32 weight, AdamW, normal init.
core::ModelConfig Model(
    int units, int64_t rows, int64_t cols,
    core::ShardingStrategy strategy = core::ShardingStrategy::kNoShard) {
  core::ModelConfig model;
  for (int u = 0; u < units; ++u) {
    core::UnitConfig unit;
    unit.name = absl::StrCat("layer", u);
    core::TensorConfig weight;
    weight.spec =
        core::TensorSpec{"weight", {rows, cols}, core::DType::kFloat32};
    weight.init = core::InitSpec::Normal(u + 1, 0.0f, 0.02f);
    unit.tensors.push_back(std::move(weight));
    model.units.push_back(std::move(unit));
  }
  model.config.strategy = strategy;
  return model;
}

memory::LimitReading Reading(std::vector<core::MemoryLimit> limits) {
  memory::LimitReading reading;
  reading.limits = std::move(limits);
  return reading;
}

core::MemoryLimit MemAvailable(int64_t bytes) {
  return core::MemoryLimit{core::LimitScope::kHost, bytes, true,
                           "/proc/meminfo MemAvailable"};
}

core::MemoryLimit Explicit(int64_t bytes) {
  return core::MemoryLimit{core::LimitScope::kTotal, bytes, false,
                           absl::StrCat("--memory_limit_bytes=", bytes)};
}

// Records what the admission reports.
class RecordingObserver : public metrics::NodeObserver {
 public:
  void MemoryAdmission(absl::string_view request, bool admitted) override {
    (admitted ? admitted_ : refused_)[std::string(request)]++;
  }
  void MemoryLimit(absl::string_view scope, int64_t usable) override {
    limits_[std::string(scope)] = usable;
  }
  std::map<std::string, int> admitted_, refused_;
  std::map<std::string, int64_t> limits_;
};

class EngineAdmissionTest : public ::testing::Test {
 protected:
  EngineAdmission& Admission(std::vector<core::MemoryLimit> limits,
                             double fraction = 1.0) {
    limits_ = std::move(limits);
    EngineAdmissionOptions options;
    options.read_limits = [this] { return Reading(limits_); };
    options.fraction = fraction;
    options.observer = &observer_;
    options.log = false;
    admission_ = std::make_unique<EngineAdmission>(std::move(options));
    return *admission_;
  }

  std::vector<core::MemoryLimit> limits_;
  RecordingObserver observer_;
  std::unique_ptr<EngineAdmission> admission_;
};

TEST_F(EngineAdmissionTest, IssueModelIsRefusedNamingPlanLimitAndSource) {
  // 4 units of one 65536 x 65536 fp32 weight on one CPU daemon with 24 GB.
  EngineAdmission& admission = Admission({MemAvailable(22 * kGiB)});
  const absl::Status s =
      admission.AdmitModel("RegisterModel", Model(4, 65536, 65536), 1, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  const std::string m(s.message());
  EXPECT_TRUE(absl::StartsWith(m,
                               "RegisterModel for rank 0 of W = 1, F = 1: the "
                               "plan does not fit in memory: it needs 272.03 "
                               "GiB"))
      << m;
  EXPECT_TRUE(absl::StrContains(m, "parameter shards 64.00 GiB (shm)")) << m;
  EXPECT_TRUE(absl::StrContains(m, "optimizer state 128.00 GiB")) << m;
  EXPECT_TRUE(absl::StrContains(m, "gradient slot 16.00 GiB (shm)")) << m;
  EXPECT_TRUE(absl::StrContains(
      m,
      "/proc/meminfo MemAvailable leaves 22.00 GiB, less a safety "
      "margin of 1.10 GiB"))
      << m;
  EXPECT_EQ(admission.refusals(), 1);
  EXPECT_EQ(observer_.refused_["register_model"], 1);
  EXPECT_EQ(observer_.limits_["host"], 22 * kGiB - 22 * kGiB / 20);
}

TEST_F(EngineAdmissionTest, ExplicitLimitAdmitsJustUnderAndRefusesJustOver) {
  const core::ModelConfig model = Model(2, 512, 1024);
  EngineAdmission& unlimited = Admission({});
  absl::StatusOr<AdmissionCheck> check = unlimited.CheckModel(model, 1, 0);
  ASSERT_TRUE(check.ok()) << check.status();
  const int64_t total = check->plan.total_bytes();
  EXPECT_GT(total, 2 * 512 * 1024 * 4 * 4);
  EXPECT_TRUE(Admission({Explicit(total)})
                  .AdmitModel("RegisterModel", model, 1, 0)
                  .ok());
  const absl::Status over =
      Admission({Explicit(total - 1)}).AdmitModel("RegisterModel", model, 1, 0);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(
      over.message(),
      absl::StrCat("of planned memory, which may use ",
                   core::FormatBytes(total - 1), " (", total - 1,
                   " B): --memory_limit_bytes=", total - 1)))
      << over.message();
}

TEST_F(EngineAdmissionTest, CheckModelRejectsBadInputNamingTheField) {
  EngineAdmission& admission = Admission({});
  EXPECT_EQ(admission.CheckModel(Model(1, 4, 4), 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<AdmissionCheck> bad =
      admission.CheckModel(Model(1, 0, 4), 1, 0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "model.units[0]"))
      << bad.status();
}

TEST_F(EngineAdmissionTest, ShardedPlanPlacesSlotsInShmAndReportsF) {
  EngineAdmission& admission = Admission({MemAvailable(64 * kGiB)});
  absl::StatusOr<AdmissionCheck> check = admission.CheckModel(
      Model(2, 1024, 1024, core::ShardingStrategy::kFullShard), 4, 3);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_TRUE(check->status.ok()) << check->status;
  EXPECT_EQ(check->sharding_factor, 4);
  EXPECT_EQ(check->rank, 3);
  // K = 2 gathered slots and G = 2 gradient slots (a reduce-scatter in
  // flight while the next gradient is written), each a whole unit.
  EXPECT_EQ(check->plan.BytesIn(core::MemoryPlacement::kSharedHost),
            4 * 1024 * 1024 * 4);
  ASSERT_EQ(check->checks.size(), 1u);
  EXPECT_EQ(check->checks[0].scope, core::LimitScope::kHost);
}

TEST_F(EngineAdmissionTest,
       AccumulationCountsHeldBytesAgainstTheExplicitLimit) {
  EngineAdmission& admission = Admission({Explicit(100 * kMiB)});
  StepEngine::GrowthAdmission admit = admission.ForEngineGrowth();
  EXPECT_TRUE(admit("layer0.accumulation", 40 * kMiB, 60 * kMiB).ok());
  const absl::Status s = admit("layer0.accumulation", 40 * kMiB, 60 * kMiB + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "ReduceGrad (accumulation buffer "
                                "layer0.accumulation): the plan does not fit"))
      << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), "less 60.00 MiB held"))
      << s.message();
  EXPECT_EQ(observer_.refused_["accumulation"], 1);
}

TEST_F(EngineAdmissionTest, AccumulationAlsoLeavesRoomForTheEnginesStaging) {
  const core::ModelConfig model = Model(1, 256, 256);
  absl::StatusOr<AdmissionCheck> check = Admission({}).CheckModel(model, 1, 0);
  ASSERT_TRUE(check.ok()) << check.status();
  const int64_t engine = check->plan.engine_breakdown().total_bytes;
  const int64_t total = check->plan.total_bytes();  // + 32 MiB of staging.
  EngineAdmission& admission = Admission({Explicit(total + 1000)});
  ASSERT_TRUE(admission.AdmitModel("RegisterModel", model, 1, 0).ok());
  StepEngine::GrowthAdmission admit = admission.ForEngineGrowth();
  EXPECT_TRUE(admit("layer0.accumulation", 1000, engine).ok());
  EXPECT_FALSE(admit("layer0.accumulation", 1001, engine).ok());
}

TEST_F(EngineAdmissionTest, CheckpointStagingIsAdmittedThenCountedAsHeld) {
  EngineAdmission& admission = Admission({Explicit(100 * kMiB)});
  // The engine holds 60 MiB: 40 MiB of staging fit, one byte more does not.
  const absl::Status over =
      admission.AdmitCheckpointStaging(40 * kMiB + 1, 60 * kMiB);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      absl::StrContains(over.message(), "an asynchronous checkpoint's staging"))
      << over.message();
  EXPECT_EQ(observer_.refused_["checkpoint_staging"], 1);
  ASSERT_TRUE(admission.AdmitCheckpointStaging(30 * kMiB, 60 * kMiB).ok());
  EXPECT_EQ(observer_.admitted_["checkpoint_staging"], 1);
  admission.NoteCheckpointStagingHeld(30 * kMiB);
  // Later growth sees the staging as held: 10 MiB are left, not 40.
  StepEngine::GrowthAdmission admit = admission.ForEngineGrowth();
  EXPECT_TRUE(admit("layer0.accumulation", 10 * kMiB, 60 * kMiB).ok());
  EXPECT_FALSE(admit("layer0.accumulation", 10 * kMiB + 1, 60 * kMiB).ok());
  admission.NoteCheckpointStagingHeld(0);  // Freed.
  EXPECT_TRUE(admit("layer0.accumulation", 40 * kMiB, 60 * kMiB).ok());
}

TEST_F(EngineAdmissionTest, SharedMemoryInitsAdmitOnlyTheReadWindow) {
  core::ModelConfig model = Model(1, 4, 4);
  model.units[0].tensors[0].init.kind = core::InitKind::kSharedMemory;
  model.units[0].tensors[0].init.shared_memory.byte_length = 8 * kGiB;
  // 8 GiB of values in 4 GiB: only one window is ever mapped.
  EXPECT_TRUE(Admission({MemAvailable(4 * kGiB)}).AdmitInitCopy(model).ok());
  EngineAdmission& tight = Admission({MemAvailable(4 << 20)});
  const absl::Status s = tight.AdmitInitCopy(model);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "init values 16.0"))
      << s.message();
  EXPECT_TRUE(tight.AdmitInitCopy(Model(1, 4, 4)).ok());
}

EngineConfig SmallConfig(int world, int rank) {
  std::vector<core::UnitLayout> units;
  for (int u = 0; u < 2; ++u) {
    units.push_back(*core::UnitLayout::Create(
        core::UnitSpec{absl::StrCat("u", u),
                       {core::TensorSpec{"w", {1000}, core::DType::kFloat32}}},
        world));
  }
  OptimizerSpec optimizer;
  optimizer.adamw.lr = 0.01;
  return EngineConfig{.rank = rank,
                      .plan = *core::ShardPlan::Create(
                          world, core::ShardingStrategy::kFullShard, world),
                      .units = std::move(units),
                      .reduce_dtype = core::DType::kFloat32,
                      .optimizer = optimizer,
                      .max_grad_norm = 0.0,
                      .max_gathered_units = 1,
                      .exclude_from_weight_decay = {}};
}

void Zeros(int, int64_t, float* out, int64_t n) {
  std::fill(out, out + n, 0.0f);
}

TEST_F(EngineAdmissionTest, ExportNeedsOneUnitAtATimeNotTheModel) {
  memory::HeapAllocator heap;
  auto engine = StepEngine::Create(SmallConfig(2, 0), Zeros, heap);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const int64_t held = (*engine)->held_bytes();
  // The writer streams: FULL on rank 0 with AdamW state needs one gathered
  // unit (1000 fp32, 4000 B), not the 2 x 1000 x 3 fp32 of the file.
  EXPECT_TRUE(Admission({Explicit(held + 4000)})
                  .AdmitExport(**engine, true, 2)
                  .status.ok());
  const ExportAdmission refused =
      Admission({Explicit(held + 3999)}).AdmitExport(**engine, true, 2);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status.message(),
                                "ExportState: the plan does not fit"));
  EXPECT_TRUE(absl::StrContains(refused.status.message(),
                                "export transfer buffer 3.91 KiB"))
      << refused.status.message();
  // Not even one unit fits: it cannot take part.
  EXPECT_FALSE(refused.join_gathers);
  // SHARDED: one of its own shards at a time (500 elements).
  const ExportAdmission sharded =
      Admission({Explicit(held + 100)}).AdmitExport(**engine, false, 2);
  EXPECT_FALSE(sharded.status.ok());
  EXPECT_FALSE(sharded.join_gathers);
  EXPECT_TRUE(Admission({Explicit(held + 2000)})
                  .AdmitExport(**engine, false, 2)
                  .status.ok());
}

TEST_F(EngineAdmissionTest, NoLimitsAdmitEverything) {
  EXPECT_TRUE(EngineAdmission::Unlimited()
                  ->AdmitModel("RegisterModel", Model(4, 65536, 65536), 1, 0)
                  .ok());
}

}  // namespace
}  // namespace shardd::node
