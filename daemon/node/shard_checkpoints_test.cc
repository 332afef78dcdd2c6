#include "daemon/node/shard_checkpoints.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/model_config.h"
#include "daemon/core/shard_plan.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/testing/fake_membership.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

core::ModelConfig Model(int64_t rows = 8) {
  core::ModelConfig model;
  core::UnitConfig& unit = model.units.emplace_back();
  unit.name = "layer0";
  core::TensorConfig& tensor = unit.tensors.emplace_back();
  tensor.spec = {"weight", {rows, 16}, core::DType::kFloat32};
  model.config.strategy = core::ShardingStrategy::kNoShard;
  model.config.sharding_factor = 1;
  model.config.optimizer = core::AdamWOptions{.lr = 0.01};
  return model;
}

class ShardCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/shard_checkpoints_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    catalog_ = std::make_unique<CheckpointCatalog>(dir_);
    auto engine = NewEngine(Model(), 0.5f);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    absl::StatusOr<UnitData> slot = engine_->GradientSlot(0);
    ASSERT_TRUE(slot.ok());
    float* g = reinterpret_cast<float*>(slot->buffer->data() + slot->offset);
    for (int64_t i = 0; i < slot->bytes / 4; ++i) g[i] = 0.125f * (i % 7);
    ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
    ASSERT_TRUE(engine_->Step(1, absl::Seconds(1)).ok());
  }
  void TearDown() override {
    recovery::Failpoints::ResetForTest();
    std::filesystem::remove_all(dir_);
  }

  // Every checkpoint write sleeps `d` halfway (fail point
  // checkpoint.write.mid), so that what a test looks at before Quiesce
  // happens while the write is in flight.
  void HoldWritesHalfway(absl::Duration d) {
    std::string spec;
    for (int hit = 1; hit <= 4; ++hit) {
      absl::StrAppend(&spec, hit > 1 ? "," : "", "checkpoint.write.mid:sleep=",
                      absl::ToInt64Milliseconds(d), "@", hit);
    }
    ASSERT_TRUE(recovery::Failpoints::Configure(spec).ok());
  }

  absl::StatusOr<std::unique_ptr<StepEngine>> NewEngine(
      const core::ModelConfig& model, float init) {
    OptimizerSpec optimizer;
    optimizer.kind = core::OptimizerKind::kAdamW;
    optimizer.adamw = std::get<core::AdamWOptions>(model.config.optimizer);
    absl::StatusOr<std::vector<core::UnitLayout>> layouts =
        core::BuildLayouts(model, 1);
    if (!layouts.ok()) return layouts.status();
    EngineConfig config{.rank = 0,
                        .plan = *core::ShardPlan::Create(
                            1, core::ShardingStrategy::kNoShard, 1),
                        .units = *layouts,
                        .reduce_dtype = core::DType::kFloat32,
                        .optimizer = optimizer,
                        .max_grad_norm = 0,
                        .max_gathered_units = 1,
                        .exclude_from_weight_decay = {{false}}};
    return StepEngine::Create(
        std::move(config),
        [init](int, int64_t, float* out, int64_t n) {
          std::fill(out, out + n, init);
        },
        heap_);
  }

  ShardCheckpoints Checkpoints(metrics::NodeObserver* observer = nullptr) {
    return ShardCheckpoints({.dir = dir_,
                             .keep_last = 2,
                             .shard_memory = &recovery::ShardMemory::Host(),
                             .catalog = catalog_.get(),
                             .membership = &members_,
                             .observer = observer});
  }

  // --async_checkpoints; admissions recorded in admitted_.
  std::unique_ptr<ShardCheckpoints> AsyncCheckpoints(
      metrics::NodeObserver* observer = nullptr, int keep_last = 2) {
    return std::make_unique<ShardCheckpoints>(ShardCheckpoints::Options{
        .dir = dir_,
        .keep_last = keep_last,
        .shard_memory = &recovery::ShardMemory::Host(),
        .catalog = catalog_.get(),
        .membership = &members_,
        .observer = observer,
        .async = true,
        .admit_staging =
            [this](int64_t bytes) {
              admitted_.push_back(bytes);
              return absl::OkStatus();
            },
        .quiesce_timeout = absl::Seconds(30)});
  }

  std::vector<int64_t> StepsOnDisk() {
    absl::StatusOr<std::vector<int64_t>> steps =
        recovery::ListShardCheckpoints(dir_, 0);
    return steps.ok() ? *steps : std::vector<int64_t>();
  }

  ShardDescription Describe() {
    ShardDescription d;
    d.engine = engine_;
    DescribeShard(*engine_, Model(),
                  core::Fingerprint(Model(), core::InitScope::kExclude),
                  &d.header, &d.sources);
    return d;
  }

  auto Creator(int* created) {
    return [this, created](const core::ModelConfig& m) {
      ++*created;
      return NewEngine(m, 0.0f);
    };
  }

  memory::HeapAllocator heap_;
  std::string dir_;
  std::unique_ptr<CheckpointCatalog> catalog_;
  // Counts the heartbeats a written checkpoint sends.
  testing::FakeMembership members_;
  std::shared_ptr<StepEngine> engine_;
  std::vector<int64_t> admitted_;
};

void ExpectSameState(StepEngine& a, StepEngine& b) {
  const auto x = a.StateSections();
  const auto y = b.StateSections();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].bytes, y[i].bytes);
    EXPECT_EQ(std::memcmp(x[i].data, y[i].data, x[i].bytes), 0) << i;
  }
}

TEST_F(ShardCheckpointsTest, AWrittenCheckpointRestoresIntoAFreshEngine) {
  ShardCheckpoints checkpoints = Checkpoints();
  checkpoints.Write(Describe(), 1, 3);
  EXPECT_EQ(members_.Count("heartbeat"),
            1);  // The coordinator hears of it at once.
  ASSERT_EQ(catalog_->Inventory().steps_size(), 1);
  EXPECT_EQ(catalog_->Inventory().steps(0), 1);
  int created = 0;
  absl::StatusOr<ShardCheckpoints::Restore> restore =
      checkpoints.Prepare(0, -1, nullptr, std::nullopt, Creator(&created));
  ASSERT_TRUE(restore.ok()) << restore.status();
  EXPECT_TRUE(restore->fresh);
  EXPECT_EQ(created, 1);
  EXPECT_EQ(restore->fingerprint,
            core::Fingerprint(Model(), core::InitScope::kExclude));
  absl::StatusOr<int64_t> step = checkpoints.Read(*restore);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 1);
  EXPECT_EQ(restore->engine->committed_step(), 1);
  ExpectSameState(*restore->engine, *engine_);
}

// Counts what ShardCheckpoints tells its observer.
class CheckpointCounter : public metrics::NodeObserver {
 public:
  void CheckpointWritten(absl::Time) override { ++written; }
  void CheckpointWriteFailed() override { ++failed; }
  void CheckpointSkipped() override { ++skipped; }
  void CheckpointStagingBytes(int64_t bytes) override { staging = bytes; }
  int written = 0;
  int failed = 0;
  int skipped = 0;
  int64_t staging = -1;
};

TEST_F(ShardCheckpointsTest, AFailedWriteIsCountedAndChangesNothing) {
  // rank-0 is a file, so the checkpoint's folder cannot be made (ENOTDIR
  // even for root, as a full or read-only disk would fail it).
  std::ofstream(dir_ + "/rank-0") << "not a folder";
  CheckpointCounter counter;
  ShardCheckpoints checkpoints = Checkpoints(&counter);
  checkpoints.Write(Describe(), 1, 3);
  EXPECT_EQ(counter.failed, 1);
  EXPECT_EQ(counter.written, 0);
  EXPECT_EQ(catalog_->Inventory().steps_size(), 0);
  EXPECT_EQ(members_.Count("heartbeat"), 0);
  // Once the disk is fixed the next write succeeds and is counted as such.
  std::filesystem::remove(dir_ + "/rank-0");
  checkpoints.Write(Describe(), 2, 3);
  EXPECT_EQ(counter.failed, 1);
  EXPECT_EQ(counter.written, 1);
  ASSERT_EQ(catalog_->Inventory().steps_size(), 1);
  EXPECT_EQ(catalog_->Inventory().steps(0), 2);
}

TEST_F(ShardCheckpointsTest, ALiveEngineIsOverwrittenNotReplaced) {
  ShardCheckpoints checkpoints = Checkpoints();
  checkpoints.Write(Describe(), 1, 3);
  auto live = NewEngine(Model(), 9.0f);
  ASSERT_TRUE(live.ok());
  std::shared_ptr<StepEngine> engine = *std::move(live);
  int created = 0;
  absl::StatusOr<ShardCheckpoints::Restore> restore =
      checkpoints.Prepare(0, 1, engine, Model(), Creator(&created));
  ASSERT_TRUE(restore.ok()) << restore.status();
  EXPECT_FALSE(restore->fresh);
  EXPECT_EQ(created, 0);
  EXPECT_EQ(restore->engine, engine);
  ASSERT_TRUE(checkpoints.Read(*restore).ok());
  ExpectSameState(*engine, *engine_);
}

TEST_F(ShardCheckpointsTest, ACheckpointOfAnotherModelIsRefused) {
  ShardCheckpoints checkpoints = Checkpoints();
  checkpoints.Write(Describe(), 1, 3);
  auto other = NewEngine(Model(4), 0.0f);
  ASSERT_TRUE(other.ok());
  int created = 0;
  absl::StatusOr<ShardCheckpoints::Restore> restore =
      checkpoints.Prepare(0, 1, *std::move(other), Model(4), Creator(&created));
  ASSERT_EQ(restore.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(restore.status().message().find("another model"),
            std::string::npos);
}

TEST_F(ShardCheckpointsTest, ACorruptCheckpointFailsItsReadNamingTheFile) {
  ShardCheckpoints checkpoints = Checkpoints();
  checkpoints.Write(Describe(), 1, 3);
  const std::string path = recovery::ShardCheckpointPath(dir_, 0, 1);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-16, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x20;
    f.seekp(-16, std::ios::end);
    f.write(&c, 1);
  }
  int created = 0;
  absl::StatusOr<ShardCheckpoints::Restore> restore =
      checkpoints.Prepare(0, 1, nullptr, std::nullopt, Creator(&created));
  ASSERT_TRUE(restore.ok()) << restore.status();
  absl::StatusOr<int64_t> step = checkpoints.Read(*restore);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss) << step.status();
}

TEST_F(ShardCheckpointsTest, WithoutADirectoryNothingIsKept) {
  ShardCheckpoints none({.dir = "",
                         .keep_last = 2,
                         .shard_memory = &recovery::ShardMemory::Host(),
                         .catalog = catalog_.get(),
                         .membership = &members_,
                         .observer = nullptr});
  EXPECT_FALSE(none.enabled());
  none.Write(Describe(), 1, 3);
  EXPECT_EQ(members_.Count("heartbeat"), 0);
  int created = 0;
  EXPECT_EQ(none.Prepare(0, 1, nullptr, std::nullopt, Creator(&created))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ShardCheckpointsTest, AnAsynchronousCheckpointIsVouchedForOnceOnDisk) {
  CheckpointCounter counter;
  std::unique_ptr<ShardCheckpoints> checkpoints = AsyncCheckpoints(&counter);
  HoldWritesHalfway(absl::Milliseconds(1000));
  checkpoints->Write(Describe(), 1, 3);
  // Written behind the caller: not yet on disk, in the inventory, nor told.
  EXPECT_EQ(catalog_->Inventory().steps_size(), 0);
  EXPECT_EQ(members_.Count("heartbeat"), 0);
  ASSERT_TRUE(checkpoints->Quiesce().ok());
  ASSERT_EQ(catalog_->Inventory().steps_size(), 1);
  EXPECT_EQ(catalog_->Inventory().steps(0), 1);
  EXPECT_EQ(members_.Count("heartbeat"), 1);
  EXPECT_EQ(counter.written, 1);
  ASSERT_EQ(admitted_.size(), 1u);
  EXPECT_GT(admitted_[0], 0);
  EXPECT_EQ(counter.staging, admitted_[0]);  // Held, shown.
  // The file restores the state as it was at Write.
  int created = 0;
  absl::StatusOr<ShardCheckpoints::Restore> restore =
      checkpoints->Prepare(0, 1, nullptr, std::nullopt, Creator(&created));
  ASSERT_TRUE(restore.ok()) << restore.status();
  ASSERT_TRUE(checkpoints->Read(*restore).ok());
  ExpectSameState(*restore->engine, *engine_);
}

TEST_F(ShardCheckpointsTest, ARollbackDiscardsTheCheckpointBeingWritten) {
  std::unique_ptr<ShardCheckpoints> checkpoints = AsyncCheckpoints();
  checkpoints->Write(Describe(), 3, 1);
  ASSERT_TRUE(checkpoints->Quiesce().ok());
  HoldWritesHalfway(absl::Milliseconds(300));
  checkpoints->Write(Describe(), 6, 1);
  // Without the discard and the wait, step 6 would land after the rollback
  // removed the abandoned timeline's files.
  checkpoints->AbandonAbove(0, 3);
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{3}));
  ASSERT_EQ(catalog_->Inventory().steps_size(), 1);
  EXPECT_EQ(catalog_->Inventory().steps(0), 3);
  EXPECT_EQ(members_.Count("heartbeat"), 1);  // Step 3's only.
}

TEST_F(ShardCheckpointsTest, ACheckpointDueWhileOneIsWrittenIsSkipped) {
  CheckpointCounter counter;
  std::unique_ptr<ShardCheckpoints> checkpoints = AsyncCheckpoints(&counter);
  HoldWritesHalfway(absl::Milliseconds(1000));
  checkpoints->Write(Describe(), 3, 1);
  checkpoints->Write(Describe(), 6, 1);
  ASSERT_TRUE(checkpoints->Quiesce().ok());
  EXPECT_EQ(counter.skipped, 1);
  EXPECT_EQ(counter.written, 1);
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{3}));
}

TEST_F(ShardCheckpointsTest, AWriteNeverPrunesTheNewestStepEveryRankHolds) {
  int64_t common = 2;
  ShardCheckpoints checkpoints({.dir = dir_,
                                .keep_last = 1,
                                .shard_memory = &recovery::ShardMemory::Host(),
                                .catalog = catalog_.get(),
                                .membership = &members_,
                                .observer = nullptr,
                                .common_step = [&] { return common; }});
  for (int64_t step : {2, 4, 6}) checkpoints.Write(Describe(), step, 1);
  // A slower rank holds only step 2: a rollback now needs it.
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{2, 6}));
  common = 6;
  checkpoints.Write(Describe(), 8, 1);
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{6, 8}));
  common = -1;  // Not known: keep_last alone.
  checkpoints.Write(Describe(), 10, 1);
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{10}));
}

TEST_F(ShardCheckpointsTest, ACheckpointWhoseStagingIsRefusedIsWrittenAtOnce) {
  CheckpointCounter counter;
  ShardCheckpoints checkpoints({.dir = dir_,
                                .keep_last = 2,
                                .shard_memory = &recovery::ShardMemory::Host(),
                                .catalog = catalog_.get(),
                                .membership = &members_,
                                .observer = &counter,
                                .async = true,
                                .admit_staging = [](int64_t) {
                                  return absl::ResourceExhaustedError(
                                      "no memory for staging");
                                }});
  checkpoints.Write(Describe(), 3, 1);
  // Written before Write returned, without the stager.
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{3}));
  ASSERT_EQ(catalog_->Inventory().steps_size(), 1);
  EXPECT_EQ(counter.written, 1);
  EXPECT_EQ(counter.failed, 0);
}

TEST_F(ShardCheckpointsTest, AStopWritesTheLastCheckpointIfItWasSkipped) {
  CheckpointCounter counter;
  std::unique_ptr<ShardCheckpoints> checkpoints = AsyncCheckpoints(&counter);
  HoldWritesHalfway(absl::Milliseconds(1000));
  checkpoints->Write(Describe(), 0, 1);  // Still being written ...
  checkpoints->Write(Describe(), 1, 1);  // ... so step 1's is skipped.
  ASSERT_EQ(counter.skipped, 1);
  // The engine is at step 1 when the daemon stops: written now.
  ASSERT_TRUE(checkpoints->Flush(Describe(), 1).ok());
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(counter.written, 2);
  // Nothing more at the next stop: step 1's is on disk.
  ASSERT_TRUE(checkpoints->Flush(Describe(), 1).ok());
  EXPECT_EQ(counter.written, 2);
}

TEST_F(ShardCheckpointsTest, AStopWritesNothingWhenTheSkippedStepIsNotTheLast) {
  CheckpointCounter counter;
  std::unique_ptr<ShardCheckpoints> checkpoints = AsyncCheckpoints(&counter);
  HoldWritesHalfway(absl::Milliseconds(1000));
  checkpoints->Write(Describe(), 0, 1);
  checkpoints->Write(Describe(), 2, 1);  // Skipped; the engine is at 1.
  ASSERT_TRUE(checkpoints->Flush(Describe(), 1).ok());
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{0}));
  EXPECT_EQ(counter.written, 1);
}

TEST_F(ShardCheckpointsTest,
       AFailedAsynchronousWriteIsCountedAndTheNextOneRuns) {
  // rank-0 is a file: the checkpoint's folder cannot be made (as a full or
  // read-only disk would fail it).
  std::ofstream(dir_ + "/rank-0") << "not a folder";
  CheckpointCounter counter;
  std::unique_ptr<ShardCheckpoints> checkpoints = AsyncCheckpoints(&counter);
  checkpoints->Write(Describe(), 1, 3);
  ASSERT_TRUE(checkpoints->Quiesce().ok());
  EXPECT_EQ(counter.failed, 1);
  EXPECT_EQ(counter.written, 0);
  EXPECT_EQ(catalog_->Inventory().steps_size(), 0);
  EXPECT_EQ(members_.Count("heartbeat"), 0);
  std::filesystem::remove(dir_ + "/rank-0");
  checkpoints->Write(Describe(), 2, 3);  // Not refused as busy.
  ASSERT_TRUE(checkpoints->Quiesce().ok());
  EXPECT_EQ(counter.skipped, 0);
  EXPECT_EQ(counter.written, 1);
  EXPECT_EQ(StepsOnDisk(), (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace shardd::node
