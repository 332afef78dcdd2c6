#include "daemon/node/trainer_ops.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/model_config.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/testing/fake_membership.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// One unit of 3 x 4 floats on a one-rank FULL_SHARD job (no communicators:
// a one-rank group's collectives are local).
EngineConfig OneRankConfig() {
  std::vector<core::UnitLayout> units;
  units.push_back(*core::UnitLayout::Create(
      {"layer0", {{"weight", {3, 4}, core::DType::kFloat32}}}, 1));
  OptimizerSpec optimizer;
  optimizer.kind = core::OptimizerKind::kSgd;
  optimizer.sgd.lr = 0.5;
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

// The node as the operations see it: an engine (or none), a ready epoch
// (or why not), and a record of what the operations told it.
class FakeHost : public TrainerOpsHost {
 public:
  absl::StatusOr<std::shared_ptr<StepEngine>> Engine() override {
    absl::MutexLock lock(&mu_);
    if (engine_ == nullptr) {
      return absl::FailedPreconditionError("no model registered");
    }
    return engine_;
  }
  absl::StatusOr<int64_t> EnterReadyEpoch() override {
    absl::MutexLock lock(&mu_);
    if (!ready_) return absl::AbortedError("not in a ready epoch");
    ++entered_;
    return epoch_;
  }
  int64_t CurrentEpoch() override {
    absl::MutexLock lock(&mu_);
    return epoch_;
  }
  absl::Status OnCollectiveError(absl::string_view what,
                                 absl::Status status) override {
    absl::MutexLock lock(&mu_);
    failures_.push_back(std::string(what));
    return absl::AbortedError(absl::StrCat(what, ": ", status.message()));
  }
  uint64_t ModelFingerprint() override { return 42; }
  void Committed(StepEngine&, const StepResult& result, int64_t epoch,
                 absl::Duration) override {
    absl::MutexLock lock(&mu_);
    commits_.push_back(absl::StrCat(result.step, "@", epoch));
  }

  void SetEngine(std::shared_ptr<StepEngine> engine) {
    absl::MutexLock lock(&mu_);
    engine_ = std::move(engine);
  }
  void SetReady(bool ready) {
    absl::MutexLock lock(&mu_);
    ready_ = ready;
  }
  void SetEpoch(int64_t epoch) {
    absl::MutexLock lock(&mu_);
    epoch_ = epoch;
  }
  int entered() {
    absl::MutexLock lock(&mu_);
    return entered_;
  }
  std::vector<std::string> failures() {
    absl::MutexLock lock(&mu_);
    return failures_;
  }
  std::vector<std::string> commits() {
    absl::MutexLock lock(&mu_);
    return commits_;
  }

 private:
  absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 3;
  std::shared_ptr<StepEngine> engine_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = true;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> commits_ ABSL_GUARDED_BY(mu_);
};

// A membership whose commit vote answers what the test says.
class VotingMembership : public testing::FakeMembership {
 public:
  absl::StatusOr<v1::ShouldCommitResponse> ShouldCommit(int64_t epoch,
                                                        int64_t step, bool,
                                                        absl::string_view,
                                                        uint64_t,
                                                        MonoTime) override {
    Log(absl::StrCat("vote(", epoch, ",", step, ")"));
    absl::MutexLock lock(&vote_mu_);
    return answer_;
  }
  void Answer(absl::StatusOr<v1::ShouldCommitResponse> answer) {
    absl::MutexLock lock(&vote_mu_);
    answer_ = std::move(answer);
  }

 private:
  absl::Mutex vote_mu_;
  absl::StatusOr<v1::ShouldCommitResponse> answer_ ABSL_GUARDED_BY(vote_mu_);
};

class CountingObserver : public metrics::NodeObserver {
 public:
  void StepAborted(absl::string_view reason) override {
    absl::MutexLock lock(&mu_);
    aborts_.push_back(std::string(reason));
  }
  std::vector<std::string> aborts() {
    absl::MutexLock lock(&mu_);
    return aborts_;
  }
  void TrainerWaited(absl::string_view call, absl::Duration waited) override {
    absl::MutexLock lock(&mu_);
    waits_.push_back(std::string(call));
    total_wait_ += waited;
  }
  // The calls that reported a wait, in order.
  std::vector<std::string> waits() {
    absl::MutexLock lock(&mu_);
    return waits_;
  }
  absl::Duration total_wait() {
    absl::MutexLock lock(&mu_);
    return total_wait_;
  }
  void TrainerCalled(absl::Time when) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(when);
  }
  std::vector<absl::Time> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> aborts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> waits_ ABSL_GUARDED_BY(mu_);
  absl::Duration total_wait_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> calls_ ABSL_GUARDED_BY(mu_);
};

v1::ShouldCommitResponse Decision(bool commit) {
  v1::ShouldCommitResponse r;
  r.set_commit(commit);
  if (!commit) r.set_reason("a peer voted no");
  return r;
}

class TrainerOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = StepEngine::Create(
        OneRankConfig(),
        [](int, int64_t, float* out, int64_t n) {
          for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
        },
        heap_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    host_.SetEngine(engine_);
    membership_.Answer(Decision(true));
    ops_ = std::make_unique<TrainerOps>(
        TrainerOpsOptions{.membership = &membership_,
                          .host = &host_,
                          .observer = &observer_,
                          .collective_timeout = absl::Seconds(5),
                          .pci_bus_id = ""});
  }

  static v1::ReduceGradRequest InlineGrad(int unit, float value, int n = 12) {
    v1::ReduceGradRequest request;
    request.set_unit(unit);
    std::vector<float> g(n, value);
    v1::DataRef* grad = request.mutable_grad();
    grad->set_dtype(v1::DTYPE_FP32);
    grad->set_byte_length(n * sizeof(float));
    grad->set_inline_data(std::string(reinterpret_cast<const char*>(g.data()),
                                      n * sizeof(float)));
    return request;
  }
  static v1::StepRequest StepOf(int64_t step) {
    v1::StepRequest request;
    request.set_step(step);
    return request;
  }
  static v1::GatherRequest GatherOf(int unit) {
    v1::GatherRequest request;
    request.set_unit(unit);
    request.set_pass(v1::PASS_BACKWARD);
    return request;
  }
  MonoTime Deadline() const { return MonoNow() + absl::Seconds(5); }
  // The unit's parameters as the engine holds them after a gather.
  std::vector<float> Params() {
    absl::StatusOr<UnitData> data = engine_->Gather(0, absl::Seconds(1));
    EXPECT_TRUE(data.ok()) << data.status();
    const float* p =
        reinterpret_cast<const float*>(data->buffer->data() + data->offset);
    std::vector<float> out(p, p + 12);
    EXPECT_TRUE(engine_->Release(0).ok());
    return out;
  }

  memory::HeapAllocator heap_;
  std::shared_ptr<StepEngine> engine_;
  FakeHost host_;
  VotingMembership membership_;
  CountingObserver observer_;
  std::unique_ptr<TrainerOps> ops_;
};

TEST_F(TrainerOpsTest, EveryOperationNeedsARegisteredModel) {
  host_.SetEngine(nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ops_->Gather(GatherOf(0), Deadline()).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ops_->ReduceGrad(InlineGrad(0, 1), Deadline()).status()));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(ops_->Step(StepOf(1), Deadline()).status()));
  v1::ReleaseRequest release;
  EXPECT_TRUE(absl::IsFailedPrecondition(ops_->Release(release).status()));
}

TEST_F(TrainerOpsTest, AStepCommitsOnceAndARetryGetsTheSameAnswer) {
  absl::StatusOr<v1::GatherResponse> gathered =
      ops_->Gather(GatherOf(0), Deadline());
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(gathered->epoch(), 3);
  EXPECT_EQ(gathered->params().byte_length(), 12 * 4);
  EXPECT_TRUE(gathered->has_grad_buffer());
  EXPECT_EQ(ops_->HeldUnits(), std::vector<int>{0});
  v1::ReleaseRequest release;
  release.set_unit(0);
  ASSERT_TRUE(ops_->Release(release)->was_gathered());
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  absl::StatusOr<v1::StepResponse> stepped = ops_->Step(StepOf(1), Deadline());
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  EXPECT_EQ(stepped->committed_step(), 1);
  EXPECT_DOUBLE_EQ(stepped->learning_rate(), 0.5);
  // SGD: 1 - 0.5 * 2 = 0.
  EXPECT_EQ(Params(), std::vector<float>(12, 0.0f));
  // The trainer lost the answer and asks again: same answer, applied once.
  absl::StatusOr<v1::StepResponse> again = ops_->Step(StepOf(1), Deadline());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->committed_step(), 1);
  EXPECT_EQ(host_.commits(), std::vector<std::string>{"1@3"});
  EXPECT_EQ(membership_.Count("vote(3,1)"), 1);
  EXPECT_EQ(Params(), std::vector<float>(12, 0.0f));
  EXPECT_TRUE(ops_->Idle());
}

TEST_F(TrainerOpsTest, EachCallThatReachesTheEngineReportsItsWaitOnce) {
  // Refused before any engine work: no report.
  EXPECT_TRUE(absl::IsInvalidArgument(
      ops_->ReduceGrad(InlineGrad(/*unit=*/5, 2.0f), Deadline()).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ops_->Step(StepOf(0), Deadline()).status()));
  EXPECT_TRUE(observer_.waits().empty());
  ASSERT_TRUE(ops_->Gather(GatherOf(0), Deadline()).ok());
  v1::ReleaseRequest release;
  release.set_unit(0);
  ASSERT_TRUE(ops_->Release(release).ok());
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  ASSERT_TRUE(ops_->Step(StepOf(1), Deadline()).ok());
  EXPECT_EQ(observer_.waits(),
            (std::vector<std::string>{"gather", "reduce_grad", "step"}));
  // One rank, F = 1: no collective, nothing waited for.
  EXPECT_EQ(observer_.total_wait(), absl::ZeroDuration());
  EXPECT_EQ(engine_->collective_wait(), absl::ZeroDuration());
}

TEST_F(TrainerOpsTest, RejectsABadGradientAndChangesNothing) {
  absl::StatusOr<v1::ReduceGradResponse> short_grad =
      ops_->ReduceGrad(InlineGrad(0, 2.0f, /*n=*/11), Deadline());
  EXPECT_TRUE(absl::IsInvalidArgument(short_grad.status()));
  EXPECT_NE(short_grad.status().message().find("grad.byte_length"),
            std::string::npos)
      << short_grad.status();
  v1::ReduceGradRequest wrong_dtype = InlineGrad(0, 2.0f);
  wrong_dtype.mutable_grad()->set_dtype(v1::DTYPE_BF16);
  EXPECT_TRUE(absl::IsInvalidArgument(
      ops_->ReduceGrad(wrong_dtype, Deadline()).status()));
  v1::ReduceGradRequest no_grad;
  EXPECT_TRUE(
      absl::IsInvalidArgument(ops_->ReduceGrad(no_grad, Deadline()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ops_->ReduceGrad(InlineGrad(1, 2.0f), Deadline()).status()));
  // Nothing was reduced: the step may not run, and a good gradient still
  // may be given.
  EXPECT_TRUE(ops_->Idle());
  EXPECT_EQ(host_.entered(), 0);
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).status()));
  EXPECT_TRUE(ops_->Step(StepOf(1), Deadline()).ok());
}

TEST_F(TrainerOpsTest, GatherReleasesFirstAndABadRequestReleasesNothing) {
  ASSERT_TRUE(ops_->Gather(GatherOf(0), Deadline()).ok());
  v1::GatherRequest bad = GatherOf(0);
  bad.add_release_first()->set_unit(0);
  bad.add_release_first()->set_unit(7);
  const absl::Status refused = ops_->Gather(bad, Deadline()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("release_first[1].unit"), std::string::npos)
      << refused;
  EXPECT_EQ(ops_->HeldUnits(), std::vector<int>{0});
  // Released, then gathered again: held once.
  v1::GatherRequest again = GatherOf(0);
  again.add_release_first()->set_unit(0);
  absl::StatusOr<v1::GatherResponse> gathered = ops_->Gather(again, Deadline());
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(ops_->HeldUnits(), std::vector<int>{0});
  v1::ReleaseRequest release;
  release.set_unit(0);
  EXPECT_TRUE(ops_->Release(release)->was_gathered());
  EXPECT_TRUE(ops_->HeldUnits().empty());
}

TEST_F(TrainerOpsTest, ReduceGradReleasesItsUnitOnlyWhenItSucceeds) {
  ASSERT_TRUE(ops_->Gather(GatherOf(0), Deadline()).ok());
  v1::ReduceGradRequest short_grad = InlineGrad(0, 2.0f, /*n=*/11);
  short_grad.set_release(true);
  EXPECT_TRUE(absl::IsInvalidArgument(
      ops_->ReduceGrad(short_grad, Deadline()).status()));
  EXPECT_EQ(ops_->HeldUnits(), std::vector<int>{0});
  v1::ReduceGradRequest good = InlineGrad(0, 2.0f);
  good.set_release(true);
  absl::StatusOr<v1::ReduceGradResponse> reduced =
      ops_->ReduceGrad(good, Deadline());
  ASSERT_TRUE(reduced.ok()) << reduced.status();
  EXPECT_TRUE(reduced->released());
  EXPECT_TRUE(ops_->HeldUnits().empty());
  // Nothing else to release: the step commits at once.
  EXPECT_TRUE(ops_->Step(StepOf(1), Deadline()).ok());
  EXPECT_EQ(Params(), std::vector<float>(12, 0.0f));
}

TEST_F(TrainerOpsTest, OutsideAReadyEpochOperationsAbortAndCountOnce) {
  host_.SetReady(false);
  EXPECT_TRUE(absl::IsAborted(ops_->Gather(GatherOf(0), Deadline()).status()));
  EXPECT_TRUE(absl::IsAborted(
      ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).status()));
  EXPECT_EQ(observer_.aborts(),
            std::vector<std::string>{metrics::node_labels::kEpochChanged});
  EXPECT_TRUE(ops_->HeldUnits().empty());
  // The ready epoch comes back: the step goes through from the start.
  host_.SetReady(true);
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  ASSERT_TRUE(ops_->Step(StepOf(1), Deadline()).ok());
  EXPECT_EQ(host_.failures(), std::vector<std::string>{});
}

TEST_F(TrainerOpsTest, AStepTheVoteRejectsIsDroppedEverywhere) {
  membership_.Answer(Decision(false));
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  absl::StatusOr<v1::StepResponse> stepped = ops_->Step(StepOf(1), Deadline());
  EXPECT_TRUE(absl::IsAborted(stepped.status())) << stepped.status();
  EXPECT_EQ(host_.failures(), std::vector<std::string>{"Step"});
  EXPECT_EQ(engine_->committed_step(), 0);
  EXPECT_FALSE(engine_->pending_step().has_value());
  EXPECT_EQ(Params(), std::vector<float>(12, 1.0f));
  EXPECT_EQ(observer_.aborts(),
            std::vector<std::string>{metrics::node_labels::kVoteRejected});
  EXPECT_TRUE(host_.commits().empty());
}

TEST_F(TrainerOpsTest, AnUnansweredVoteLeavesTheStepInDoubt) {
  membership_.Answer(absl::UnavailableError("coordinator unreachable"));
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  EXPECT_TRUE(absl::IsAborted(ops_->Step(StepOf(1), Deadline()).status()));
  EXPECT_EQ(engine_->pending_step(), std::optional<int64_t>(1));
  EXPECT_EQ(engine_->committed_step(), 0);
  EXPECT_EQ(observer_.aborts(),
            std::vector<std::string>{metrics::node_labels::kEpochChanged});
}

TEST_F(TrainerOpsTest, ANewEpochAbandonsTheStepUnderWay) {
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  EXPECT_FALSE(ops_->Idle());
  // As the node does when it installs an epoch's communicators.
  engine_->SetCommunicators(nullptr, nullptr);
  ops_->NewEpoch();
  EXPECT_TRUE(ops_->Idle());
  // The step is redone from its first ReduceGrad.
  absl::Status early = ops_->Step(StepOf(1), Deadline()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(early)) << early;
  absl::Status again =
      ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).status();
  ASSERT_TRUE(again.ok()) << again;
  absl::Status stepped = ops_->Step(StepOf(1), Deadline()).status();
  ASSERT_TRUE(stepped.ok()) << stepped;
}

// A trainer stopped (or slow) between two calls while its peers timed out
// and a new epoch formed: it was told nothing, and would go on with the
// old attempt's remaining collectives in the new epoch, where its peers
// start the step afresh. Its calls are refused until it calls WaitReady.
TEST_F(TrainerOpsTest, AnAttemptDoesNotCrossAnEpochChange) {
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  // As the node does when it installs epoch 4's communicators.
  engine_->SetCommunicators(nullptr, nullptr);
  ops_->NewEpoch();
  host_.SetEpoch(4);
  for (int i = 0; i < 2; ++i) {  // Not just once: until WaitReady.
    absl::Status told = ops_->Step(StepOf(1), Deadline()).status();
    // FAILED_PRECONDITION (unit 0 not reduced in this epoch) comes first.
    EXPECT_TRUE(absl::IsFailedPrecondition(told)) << told;
    told = ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).status();
    EXPECT_TRUE(absl::IsAborted(told)) << told;
    EXPECT_NE(told.message().find("began in epoch 3 and the daemon is in "
                                  "epoch 4"),
              absl::string_view::npos)
        << told;
    // Accumulating belongs to the attempt too.
    v1::ReduceGradRequest accumulate = InlineGrad(0, 2.0f);
    accumulate.set_accumulate_only(true);
    EXPECT_TRUE(
        absl::IsAborted(ops_->ReduceGrad(accumulate, Deadline()).status()));
  }
  EXPECT_EQ(observer_.aborts(),
            std::vector<std::string>{metrics::node_labels::kEpochChanged});
  EXPECT_EQ(engine_->committed_step(), 0);
  ops_->NoteWaitReady();
  // Redone in epoch 4, the step commits there.
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  ASSERT_TRUE(ops_->Step(StepOf(1), Deadline()).ok());
  EXPECT_EQ(host_.commits(), std::vector<std::string>{"1@4"});
}

TEST_F(TrainerOpsTest, ANewEpochBetweenStepsRefusesNothing) {
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  ASSERT_TRUE(ops_->Step(StepOf(1), Deadline()).ok());
  engine_->SetCommunicators(nullptr, nullptr);
  ops_->NewEpoch();
  host_.SetEpoch(4);
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  ASSERT_TRUE(ops_->Step(StepOf(2), Deadline()).ok());
  EXPECT_EQ(host_.commits(), (std::vector<std::string>{"1@3", "2@4"}));
  EXPECT_TRUE(observer_.aborts().empty());
}

// Every step call tells the observer when the trainer last called, those
// refused included: a stuck trainer is one that stops calling.
TEST_F(TrainerOpsTest, EveryCallIsNotedWithItsTime) {
  const absl::Time before = absl::Now();
  ASSERT_TRUE(ops_->Gather(GatherOf(0), Deadline()).ok());
  v1::ReleaseRequest release;
  release.set_unit(0);
  ASSERT_TRUE(ops_->Release(release).ok());
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument(ops_->Step(StepOf(0), Deadline()).status()));
  ops_->NoteWaitReady();
  const std::vector<absl::Time> calls = observer_.calls();
  ASSERT_EQ(calls.size(), 5u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_GE(calls[i], i == 0 ? before : calls[i - 1]);
  }
  EXPECT_LE(calls.back(), absl::Now());
}

// Two trainer processes on one daemon: the newest registration wins, and
// the older one's calls are refused by name instead of interleaving.
TEST_F(TrainerOpsTest, AnEarlierDaemonsAttachmentMustReattach) {
  // A replacement daemon (nothing registered with it, its shard copied from
  // a replica) called by a trainer that registered with the daemon before
  // it: its buffers are the old daemon's.
  const absl::Status earlier =
      ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline(), 0x1234).status();
  EXPECT_TRUE(absl::IsUnavailable(earlier)) << earlier;
  EXPECT_NE(earlier.message().find("attachment 0000000000001234 is an "
                                   "earlier daemon's"),
            absl::string_view::npos)
      << earlier;
  EXPECT_TRUE(absl::IsUnavailable(
      ops_->Gather(GatherOf(0), Deadline(), 0x1234).status()));
  EXPECT_TRUE(
      absl::IsUnavailable(ops_->Step(StepOf(1), Deadline(), 0x1234).status()));
  EXPECT_TRUE(ops_->HeldUnits().empty());  // Nothing was done.
  // Re-attached, it goes on.
  const uint64_t attached = ops_->NewAttachment();
  EXPECT_TRUE(ops_->Gather(GatherOf(0), Deadline(), attached).ok());
}

TEST_F(TrainerOpsTest, ASupersededAttachmentIsRefused) {
  const uint64_t old_one = ops_->NewAttachment();
  ASSERT_NE(old_one, 0u);
  ASSERT_TRUE(ops_->Gather(GatherOf(0), Deadline(), old_one).ok());
  const uint64_t new_one = ops_->NewAttachment();
  ASSERT_NE(new_one, old_one);
  v1::ReleaseRequest release;
  release.set_unit(0);
  const absl::Status refused = ops_->Release(release, old_one).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("is superseded"), absl::string_view::npos)
      << refused;
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ops_->Gather(GatherOf(0), Deadline(), old_one).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline(), old_one).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ops_->Step(StepOf(1), Deadline(), old_one).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(ops_->CheckAttachment(old_one)));
  // The refused calls changed nothing: unit 0 is still held.
  EXPECT_EQ(ops_->HeldUnits(), std::vector<int>{0});
  // The newest, or a caller that sends none, goes on.
  ASSERT_TRUE(ops_->Release(release, new_one).ok());
  ASSERT_TRUE(ops_->ReduceGrad(InlineGrad(0, 2.0f), Deadline()).ok());
  ASSERT_TRUE(ops_->Step(StepOf(1), Deadline(), new_one).ok());
}

TEST_F(TrainerOpsTest, DetachReleasesWhatTheOldTrainerHeld) {
  ASSERT_TRUE(ops_->Gather(GatherOf(0), Deadline()).ok());
  absl::MutexLock op(&ops_->op_mutex());
  EXPECT_TRUE(ops_->Detach(*engine_));  // It issued a collective.
  EXPECT_TRUE(ops_->HeldUnits().empty());
  EXPECT_FALSE(ops_->Detach(*engine_));
}

// Statuses are read by code: a dead or hung peer is a peer failure, INTERNAL
// and UNKNOWN are shardd's own bugs, the rest the request's.
TEST(ClassifyFailureTest, ReadsTheCodeOnly) {
  using F = OperationFailure;
  EXPECT_EQ(ClassifyFailure(absl::UnavailableError("peer")), F::kPeer);
  EXPECT_EQ(ClassifyFailure(absl::DeadlineExceededError("hung")), F::kPeer);
  EXPECT_EQ(ClassifyFailure(absl::AbortedError("epoch")), F::kPeer);
  EXPECT_EQ(ClassifyFailure(absl::CancelledError("aborted")), F::kPeer);
  EXPECT_EQ(ClassifyFailure(absl::InternalError("peer died")), F::kBug);
  EXPECT_EQ(ClassifyFailure(absl::UnknownError("?")), F::kBug);
  EXPECT_EQ(ClassifyFailure(absl::InvalidArgumentError("unavailable")),
            F::kRequest);
  EXPECT_EQ(ClassifyFailure(absl::ResourceExhaustedError("x")), F::kRequest);
  EXPECT_EQ(ClassifyFailure(absl::FailedPreconditionError("x")), F::kRequest);
  EXPECT_TRUE(IsCollectiveFailure(absl::UnavailableError("x")));
  EXPECT_FALSE(IsCollectiveFailure(absl::InternalError("x")));
}

}  // namespace
}  // namespace shardd::node
