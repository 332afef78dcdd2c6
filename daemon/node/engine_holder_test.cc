#include "daemon/node/engine_holder.h"

#include <memory>

#include "daemon/core/model_config.h"
#include "daemon/core/shard_plan.h"
#include "daemon/memory/byte_buffer.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

class EngineHolderTest : public ::testing::Test {
 protected:
  std::shared_ptr<StepEngine> NewEngine() {
    std::vector<core::UnitLayout> units;
    units.push_back(*core::UnitLayout::Create(
        {"layer0", {{"weight", {2, 2}, core::DType::kFloat32}}}, 1));
    OptimizerSpec optimizer;
    optimizer.kind = core::OptimizerKind::kSgd;
    optimizer.sgd.lr = 0.1;
    EngineConfig config{.rank = 0,
                        .plan = *core::ShardPlan::Create(
                            1, core::ShardingStrategy::kFullShard, 1),
                        .units = std::move(units),
                        .reduce_dtype = core::DType::kFloat32,
                        .optimizer = optimizer,
                        .max_grad_norm = 0,
                        .max_gathered_units = 1,
                        .exclude_from_weight_decay = {}};
    auto engine = StepEngine::Create(
        std::move(config),
        [](int, int64_t, float* out, int64_t n) {
          std::fill(out, out + n, 1.0f);
        },
        heap_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::shared_ptr<StepEngine>(*std::move(engine))
                       : nullptr;
  }
  memory::HeapAllocator heap_;
};

TEST_F(EngineHolderTest, HoldsNothingUntilAnEngineIsInstalled) {
  EngineHolder holder;
  EXPECT_EQ(holder.engine(), nullptr);
  EXPECT_FALSE(holder.model_if_any().has_value());
  EXPECT_EQ(holder.fingerprint(), 0u);
  EXPECT_TRUE(holder.agreement().empty());
}

TEST_F(EngineHolderTest,
       InstallReplacesEngineModelFingerprintAndAgreementTogether) {
  EngineHolder holder;
  EpochCommunicators none;
  core::ModelConfig first;
  first.units.emplace_back().name = "a";
  std::shared_ptr<StepEngine> one = NewEngine();
  holder.Install(one, first, 11, "agreed-a", none);
  EXPECT_EQ(holder.engine(), one);
  EXPECT_EQ(holder.model().units[0].name, "a");
  EXPECT_EQ(holder.fingerprint(), 11u);
  EXPECT_EQ(holder.agreement(), "agreed-a");
  core::ModelConfig second;
  second.units.emplace_back().name = "b";
  std::shared_ptr<StepEngine> two = NewEngine();
  holder.Install(two, second, 22, "", none);
  EXPECT_EQ(holder.engine(), two);
  EXPECT_EQ(holder.model().units[0].name, "b");
  EXPECT_EQ(holder.fingerprint(), 22u);
  // An engine whose agreement is unknown (restored) does not keep the old
  // engine's: it would be published for a model it may not be.
  EXPECT_TRUE(holder.agreement().empty());
  EXPECT_EQ(one.use_count(), 1);  // The old engine is no longer shared.
  holder.Reset();
  EXPECT_EQ(holder.engine(), nullptr);
  EXPECT_FALSE(holder.model_if_any().has_value());
  EXPECT_EQ(two.use_count(), 1);
}

// The coordinator is told whether the shard is still what registering the
// model made: true from the registration until a step is committed on it;
// never for an engine copied or restored, nor after a restore into it.
TEST_F(EngineHolderTest, RegistrationStateLastsUntilAStepIsCommitted) {
  EngineHolder holder;
  EpochCommunicators none;
  EXPECT_FALSE(holder.registration_state());
  std::shared_ptr<StepEngine> engine = NewEngine();
  ASSERT_TRUE(engine->InstallState(6).ok());  // An imported step 6.
  holder.Install(engine, core::ModelConfig(), 1, "", none);
  EXPECT_FALSE(holder.registration_state());  // Copied or restored.
  holder.NoteRegistered();
  EXPECT_TRUE(holder.registration_state());
  ASSERT_TRUE(engine->InstallState(7).ok());  // As a commit moves it on.
  EXPECT_FALSE(holder.registration_state());
  holder.Install(NewEngine(), core::ModelConfig(), 1, "", none);
  holder.NoteRegistered();
  EXPECT_TRUE(holder.registration_state());
  holder.ForgetRegistration();  // A checkpoint restored into it.
  EXPECT_FALSE(holder.registration_state());
}

}  // namespace
}  // namespace shardd::node
