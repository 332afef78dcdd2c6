#include "daemon/node/commit_sink.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/model_config.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

using Kind = recovery::CommitRecord::Kind;

EngineConfig OneRankConfig() {
  std::vector<core::UnitLayout> units;
  units.push_back(*core::UnitLayout::Create(
      {"layer0", {{"weight", {3, 4}, core::DType::kFloat32}}}, 1));
  OptimizerSpec optimizer;
  optimizer.kind = core::OptimizerKind::kAdamW;
  optimizer.adamw.lr = 0.01;
  return EngineConfig{.rank = 0,
                      .plan = *core::ShardPlan::Create(
                          1, core::ShardingStrategy::kFullShard, 1),
                      .units = std::move(units),
                      .reduce_dtype = core::DType::kFloat32,
                      .optimizer = optimizer,
                      .max_grad_norm = 0,
                      .max_gathered_units = 1,
                      .exclude_from_weight_decay = {}};
}

void Init(int, int64_t offset, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = 0.5f * static_cast<float>(offset + i);
}

// The CRC-32C of the engine's whole state, computed here from the host
// memory it lives in.
uint32_t StateCrc(StepEngine& engine) {
  uint32_t crc = 0;
  for (const StepEngine::StateSection& s : engine.StateSections()) {
    crc = core::Crc32cExtend(crc, static_cast<const uint8_t*>(s.data),
                             static_cast<size_t>(s.bytes));
  }
  return crc;
}

class CommitSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = StepEngine::Create(OneRankConfig(), Init, heap_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    char dir[] = "/tmp/commit_sink_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    log_path_ = dir_ + "/commits.log";
  }
  void TearDown() override {
    unlink(log_path_.c_str());
    rmdir(dir_.c_str());
  }
  // A step of the engine with gradient 1 everywhere: the state changes.
  void RunStep(int64_t step) {
    absl::StatusOr<UnitData> slot = engine_->GradientSlot(0);
    ASSERT_TRUE(slot.ok()) << slot.status();
    float* g = reinterpret_cast<float*>(slot->buffer->data() + slot->offset);
    for (int64_t i = 0; i < slot->bytes / 4; ++i) g[i] = 1.0f;
    ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
    ASSERT_TRUE(engine_->Step(step, absl::Seconds(1)).ok());
  }
  std::vector<v1::TrainerEvent> Events() {
    std::vector<v1::TrainerEvent> out;
    events_.WaitAfter(0, MonoTime::InfinitePast(), &out);
    return out;
  }

  memory::HeapAllocator heap_;
  std::unique_ptr<StepEngine> engine_;
  EventLog events_;
  std::string dir_;
  std::string log_path_;
};

TEST_F(CommitSinkTest, ACommitIsLoggedToldAndCheckpointedEveryInterval) {
  CommitSink::Options options;
  options.commit_log = *recovery::CommitLog::Open(log_path_);
  options.events = &events_;
  options.checkpoint_interval_steps = 2;
  std::vector<std::pair<int64_t, int64_t>> checkpoints;
  options.write_checkpoint = [&](int64_t step, int64_t epoch) {
    checkpoints.emplace_back(step, epoch);
  };
  CommitSink sink(std::move(options));
  ASSERT_TRUE(sink.logs_commits());
  std::vector<uint32_t> crcs;
  for (int64_t step = 1; step <= 4; ++step) {
    RunStep(step);
    sink.Committed(*engine_, step, 0.25 * step, /*epoch=*/7);
    crcs.push_back(StateCrc(*engine_));
  }
  EXPECT_EQ(checkpoints,
            (std::vector<std::pair<int64_t, int64_t>>{{2, 7}, {4, 7}}));
  const std::vector<v1::TrainerEvent> events = Events();
  ASSERT_EQ(events.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(events[i].epoch(), 7);
    EXPECT_EQ(events[i].step_committed().step(), i + 1);
    EXPECT_EQ(events[i].step_committed().grad_norm(), 0.25 * (i + 1));
  }
  absl::StatusOr<std::vector<recovery::CommitRecord>> records =
      recovery::CommitLog::Read(log_path_);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const recovery::CommitRecord& r = (*records)[i];
    EXPECT_EQ(r.kind, Kind::kCommit);
    EXPECT_EQ(r.step, i + 1);
    EXPECT_EQ(r.epoch, 7);
    EXPECT_EQ(r.rank, 0);
    EXPECT_EQ(r.shard_index, 0);
    // The whole state's checksum, which moved with every step.
    EXPECT_EQ(r.shard_crc32c, crcs[i]) << "step " << i + 1;
    if (i > 0) {
      EXPECT_NE(crcs[i], crcs[i - 1]);
    }
  }
}

TEST_F(CommitSinkTest, OtherStateChangesAreLoggedWithTheirKind) {
  CommitSink::Options options;
  options.commit_log = *recovery::CommitLog::Open(log_path_);
  options.events = &events_;
  CommitSink sink(std::move(options));
  sink.Record(*engine_, Kind::kInit, 0, 1);
  sink.Record(*engine_, Kind::kFinal, 0, 2);
  const std::vector<recovery::CommitRecord> records =
      *recovery::CommitLog::Read(log_path_);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].kind, Kind::kInit);
  EXPECT_EQ(records[1].kind, Kind::kFinal);
  EXPECT_EQ(records[1].epoch, 2);
  EXPECT_EQ(records[0].shard_crc32c, StateCrc(*engine_));
  EXPECT_TRUE(Events().empty());  // Only commits are events.
}

TEST_F(CommitSinkTest, WithoutALogCommitsAreStillToldAndCheckpointed) {
  CommitSink::Options options;
  options.events = &events_;
  options.checkpoint_interval_steps = 1;
  int checkpoints = 0;
  options.write_checkpoint = [&](int64_t, int64_t) { ++checkpoints; };
  CommitSink sink(std::move(options));
  EXPECT_FALSE(sink.logs_commits());
  RunStep(1);
  sink.Committed(*engine_, 1, 0.5, 3);
  sink.Record(*engine_, Kind::kInit, 0, 3);  // Nothing to write to.
  EXPECT_EQ(checkpoints, 1);
  EXPECT_EQ(Events().size(), 1u);
  EXPECT_NE(access(log_path_.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace shardd::node
