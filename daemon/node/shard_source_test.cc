#include "daemon/node/shard_source.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/model_config.h"
#include "daemon/core/shard_plan.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/testing/fake_membership.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// The epoch this node sees (a test moves it mid-stream).
coordinator::MembershipView InEpoch(int64_t epoch) {
  coordinator::MembershipView v;
  v.epoch = epoch;
  return v;
}

core::ModelConfig Model() {
  core::ModelConfig model;
  core::UnitConfig unit;
  unit.name = "layer0";
  core::TensorConfig tensor;
  tensor.spec = {"weight", {64, 64}, core::DType::kFloat32};
  unit.tensors.push_back(tensor);
  model.units.push_back(unit);
  model.config.strategy = core::ShardingStrategy::kNoShard;
  model.config.sharding_factor = 1;
  model.config.optimizer = core::AdamWOptions{.lr = 0.01};
  return model;
}

class ShardSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    members_.SetView(InEpoch(9));
    const core::ModelConfig model = Model();
    OptimizerSpec optimizer;
    optimizer.kind = core::OptimizerKind::kAdamW;
    optimizer.adamw = std::get<core::AdamWOptions>(model.config.optimizer);
    EngineConfig config{.rank = 0,
                        .plan = *core::ShardPlan::Create(
                            1, core::ShardingStrategy::kNoShard, 1),
                        .units = *core::BuildLayouts(model, 1),
                        .reduce_dtype = core::DType::kFloat32,
                        .optimizer = optimizer,
                        .max_grad_norm = 0,
                        .max_gathered_units = 1,
                        .exclude_from_weight_decay = {{false}}};
    auto engine = StepEngine::Create(
        std::move(config),
        [](int, int64_t offset, float* out, int64_t n) {
          for (int64_t i = 0; i < n; ++i) out[i] = 0.001f * (offset + i);
        },
        heap_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    // One step: the moments are non-zero too.
    absl::StatusOr<UnitData> slot = engine_->GradientSlot(0);
    ASSERT_TRUE(slot.ok());
    float* g = reinterpret_cast<float*>(slot->buffer->data() + slot->offset);
    for (int64_t i = 0; i < slot->bytes / 4; ++i) g[i] = 0.25f * (i % 5);
    ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
    ASSERT_TRUE(engine_->Step(1, absl::Seconds(1)).ok());
  }

  ShardSource::Options Options() {
    ShardSource::Options o;
    o.shard_memory = &recovery::ShardMemory::Host();
    o.membership = &members_;
    o.snapshot = [this] {
      ShardSource::Snapshot s;
      if (!registered_) return s;
      s.engine = engine_;
      DescribeShard(*engine_, Model(),
                    core::Fingerprint(Model(), core::InitScope::kExclude),
                    &s.header, &s.sources);
      return s;
    };
    o.replica_group_of = [](int64_t, MonoTime) { return nullptr; };
    return o;
  }

  v1::FetchShardRequest Request() const {
    v1::FetchShardRequest r;
    r.set_epoch(9);
    r.set_requester_rank(2);
    r.set_shard_index(0);
    r.set_step(1);
    r.set_max_chunk_bytes(4096);
    return r;
  }

  MonoTime Later() const { return MonoNow() + absl::Seconds(30); }

  memory::HeapAllocator heap_;
  std::shared_ptr<StepEngine> engine_;
  testing::FakeMembership members_;
  bool registered_ = true;
};

TEST_F(ShardSourceTest, StreamsTheWholeStateThatAReceiverReassembles) {
  ShardSource source(Options());
  std::vector<std::vector<uint8_t>> received;
  recovery::ShardStreamAssembler assembler(
      [&](const v1::ShardHeader& header,
          int index) -> absl::StatusOr<uint8_t*> {
        if (received.empty()) received.resize(header.sections_size());
        received[index].resize(header.sections(index).byte_length());
        return received[index].data();
      });
  int messages = 0;
  absl::Status served =
      source.Serve(Request(), Later(), [&](const v1::FetchShardResponse& m) {
        ++messages;
        return assembler.Add(m).ok();
      });
  ASSERT_TRUE(served.ok()) << served;
  ASSERT_TRUE(assembler.Finish().ok());
  EXPECT_GT(messages, 3);  // Header, several 4 KiB chunks, trailer.
  EXPECT_EQ(assembler.header().step(), 1);
  EXPECT_EQ(assembler.header().epoch(), 9);
  const std::vector<StepEngine::StateSection> sections =
      engine_->StateSections();
  ASSERT_EQ(received.size(), sections.size());
  for (size_t i = 0; i < sections.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(received[i].size()), sections[i].bytes);
    EXPECT_EQ(
        std::memcmp(received[i].data(), sections[i].data, sections[i].bytes), 0)
        << "section " << i;
  }
}

TEST_F(ShardSourceTest, MalformedRequestsAreRefusedBeforeAnything) {
  v1::FetchShardRequest r = Request();
  r.set_max_chunk_bytes(-1);
  EXPECT_EQ(ShardSource::CheckRequest(r).code(),
            absl::StatusCode::kInvalidArgument);
  r = Request();
  r.set_shard_index(-2);
  ShardSource source(Options());
  int sent = 0;
  EXPECT_EQ(
      source.Serve(r, Later(), [&](const auto&) { return ++sent > 0; }).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sent, 0);
}

TEST_F(ShardSourceTest, AStalePlanIsAFailedPreconditionAnOldEpochAborted) {
  ShardSource source(Options());
  const auto no_send = [](const v1::FetchShardResponse&) { return true; };
  v1::FetchShardRequest r = Request();
  r.set_shard_index(1);
  absl::Status s = source.Serve(r, Later(), no_send);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("holds shard 0, not 1"), std::string::npos) << s;
  r = Request();
  r.set_step(2);
  EXPECT_EQ(source.Serve(r, Later(), no_send).code(),
            absl::StatusCode::kFailedPrecondition);
  r = Request();
  r.set_epoch(8);
  EXPECT_EQ(source.Serve(r, Later(), no_send).code(),
            absl::StatusCode::kAborted);
  registered_ = false;
  s = source.Serve(Request(), Later(), no_send);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("holds no model"), std::string::npos) << s;
}

TEST_F(ShardSourceTest, AReceiverThatLeavesEndsTheStream) {
  ShardSource source(Options());
  int sent = 0;
  absl::Status s =
      source.Serve(Request(), Later(), [&](const v1::FetchShardResponse&) {
        return ++sent < 2;  // Gone after one.
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(sent, 2);
}

TEST_F(ShardSourceTest, AnEpochChangeMidStreamAbortsIt) {
  ShardSource source(Options());
  int sent = 0;
  absl::Status s =
      source.Serve(Request(), Later(), [&](const v1::FetchShardResponse&) {
        if (++sent == 2) members_.SetView(InEpoch(10));
        return true;
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("epoch changed from 9"), std::string::npos);
  EXPECT_EQ(sent, 2);
}

TEST_F(ShardSourceTest, APassedDeadlineEndsTheStream) {
  ShardSource source(Options());
  absl::Status s =
      source.Serve(Request(), MonoNow() - absl::Seconds(1),
                   [](const v1::FetchShardResponse&) { return true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
}

TEST_F(ShardSourceTest, PrecomputingWhileAComputationRunsStartsNoOther) {
  absl::Mutex mu;
  int snapshots = 0;
  bool entered = false;
  bool release = false;
  ShardSource::Options o = Options();
  auto inner = o.snapshot;
  o.snapshot = [&] {
    absl::MutexLock lock(&mu);
    ++snapshots;
    entered = true;
    mu.Await(absl::Condition(&release));
    return inner();
  };
  ShardSource source(std::move(o));
  source.StartPrecompute();
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&entered));
  }
  source.StartPrecompute();  // Under way: nothing new.
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  // Serve (in the stream) takes a snapshot of its own.
  ASSERT_TRUE(source
                  .Serve(Request(), Later(),
                         [](const v1::FetchShardResponse&) { return true; })
                  .ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(snapshots, 2);  // One computation's and the Serve's.
  }
}

// The pure decisions of Serve: whom it serves, who may receive over the
// replica group, and what ends a stream.

v1::FetchShardRequest ServableRequest() {
  v1::FetchShardRequest request;
  request.set_shard_index(1);
  request.set_epoch(7);
  request.set_step(3);
  return request;
}

TEST(ShardSourceCheckTest, ServesOnlyItsShardAtItsEpochAndStep) {
  // Rank 5 with F = 2 holds shard 1.
  EXPECT_TRUE(ShardSource::CheckServable(ServableRequest(), 5, 2, 7, 3).ok());
  v1::FetchShardRequest other_shard = ServableRequest();
  other_shard.set_shard_index(0);
  const absl::Status shard =
      ShardSource::CheckServable(other_shard, 5, 2, 7, 3);
  EXPECT_EQ(shard.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(shard.message(),
            "shard_index: this daemon (rank 5) holds shard 1, not 0: the "
            "plan is stale");
  EXPECT_EQ(ShardSource::CheckServable(ServableRequest(), 5, 2, 8, 3).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(ShardSource::CheckServable(ServableRequest(), 5, 2, 7, 4).code(),
            absl::StatusCode::kFailedPrecondition);
  // A stale shard is named before the epoch.
  EXPECT_EQ(ShardSource::CheckServable(other_shard, 5, 2, 8, 4).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ShardSourceCheckTest, OnlyAnotherMemberOfTheReplicaGroupReceivesOverIt) {
  // F = 2, shard 1, this node at replica rank 2 of 3 (rank 5).
  v1::FetchShardRequest request = ServableRequest();
  request.set_requester_rank(1);  // Replica rank 0.
  EXPECT_TRUE(ShardSource::CheckRequesterInReplicaGroup(request, 2, 2, 3).ok());
  for (int requester : {-1, 0, 5, 7}) {
    // Negative; another shard; this node itself; past the group.
    request.set_requester_rank(requester);
    const absl::Status s =
        ShardSource::CheckRequesterInReplicaGroup(request, 2, 2, 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << requester;
  }
  request.set_requester_rank(7);
  EXPECT_EQ(
      ShardSource::CheckRequesterInReplicaGroup(request, 2, 2, 3).message(),
      "requester_rank: 7 is not another member of shard 1's replica "
      "group (F = 2, 3 replicas)");
}

TEST(ShardSourceCheckTest, ADeadlineOrANewEpochEndsTheStream) {
  EXPECT_TRUE(ShardSource::CheckStillServing(false, 7, 7, 10, 100).ok());
  const absl::Status late = ShardSource::CheckStillServing(true, 8, 7, 10, 100);
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late.message(),
            "FetchShard: deadline reached after 10 of 100 bytes");
  const absl::Status moved =
      ShardSource::CheckStillServing(false, 8, 7, 10, 100);
  EXPECT_EQ(moved.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(moved.message(), "FetchShard: the epoch changed from 7 mid-stream");
}

}  // namespace
}  // namespace shardd::node
