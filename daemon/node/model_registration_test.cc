#include "daemon/node/model_registration.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/core/rendezvous_key.h"
#include "daemon/node/cpu_engine_backend.h"
#include "daemon/node/proto_convert.h"
#include "daemon/node/testing/fake_membership.h"
#include "daemon/node/trainer_ops.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// One unit ("layer0": weight [rows, 3] at 0.5, bias [3]) with SGD.
v1::ModelSpec Model(int f, int64_t rows = 4) {
  v1::ModelSpec spec;
  v1::UnitSpec* unit = spec.add_units();
  unit->set_name("layer0");
  v1::TensorSpec* w = unit->add_tensors();
  w->set_name("weight");
  w->add_shape(rows);
  w->add_shape(3);
  w->set_dtype(v1::DTYPE_FP32);
  w->mutable_init()->mutable_constant()->set_value(0.5f);
  v1::TensorSpec* b = unit->add_tensors();
  b->set_name("bias");
  b->add_shape(3);
  b->set_dtype(v1::DTYPE_FP32);
  v1::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(v1::SHARDING_STRATEGY_FULL_SHARD);
  c->set_sharding_factor(f);
  c->set_max_gathered_units(1);
  c->mutable_optimizer()->mutable_sgd()->set_lr(0.5);
  return spec;
}

v1::RegisterModelRequest Request(const v1::ModelSpec& model) {
  v1::RegisterModelRequest request;
  *request.mutable_model() = model;
  request.set_transport(v1::TRANSPORT_SHARED_MEMORY);
  return request;
}

// Every epoch's store of the test is one InMemoryStore; a node's client
// borrows it.
class BorrowedStore : public comm::Store {
 public:
  explicit BorrowedStore(comm::Store* store) : store_(store) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return store_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key) override {
    return store_->Get(key);
  }
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    return store_->Wait(keys, timeout);
  }

 private:
  comm::Store* const store_;
};

// The node as a registration sees it: W and F, a ready epoch (or not), the
// engine it holds, and a record of what the registration told it. The
// trainer operations are real (TrainerOps, whose host it is too), so that
// a re-attach detaches a real trainer.
class FakeNode : public ModelRegistrationHost, public TrainerOpsHost {
 public:
  FakeNode(testing::FakeMembership* membership, comm::Store* store, int world,
           int factor)
      : store_(store), world_(world), factor_(factor) {
    ops_ = std::make_unique<TrainerOps>(
        TrainerOpsOptions{.membership = membership,
                          .host = static_cast<TrainerOpsHost*>(this),
                          .observer = nullptr,
                          .collective_timeout = absl::Seconds(5),
                          .pci_bus_id = ""});
  }

  // ModelRegistrationHost.
  bool Stopping() const override { return stopping_.load(); }
  void Stop() { stopping_.store(true); }
  absl::StatusOr<int64_t> AwaitReadyEpoch(MonoTime) override {
    absl::MutexLock lock(&mu_);
    ++awaits_;
    if (world_ == 0 || !ready_) {
      return absl::DeadlineExceededError("not in a ready epoch");
    }
    return kEpoch;
  }
  absl::Mutex& TrainerOpMutex() override { return ops_->op_mutex(); }
  NodeModelState ModelState() override {
    absl::MutexLock lock(&mu_);
    NodeModelState state;
    state.world_size = world_;
    state.sharding_factor = factor_;
    state.epoch = kEpoch;
    state.engine = engine_;
    state.model = model_;
    return state;
  }
  bool DetachTrainer(StepEngine& engine) override {
    return ops_->Detach(engine);
  }
  void AbandonEpoch(absl::string_view why, v1::FailureKind,
                    int64_t epoch) override {
    Log(absl::StrCat("abandon(", epoch, "): ", why));
  }
  std::unique_ptr<comm::Store> StoreOfEpoch(int64_t epoch) override {
    Log(absl::StrCat("store(", epoch, ")"));
    return std::make_unique<BorrowedStore>(store_);
  }
  int64_t InstallRegistered(std::shared_ptr<StepEngine> engine,
                            core::ModelConfig model, uint64_t fingerprint,
                            std::string agreement) override {
    {
      absl::MutexLock lock(&mu_);
      agreement_ = std::move(agreement);
      engine_ = std::move(engine);
      model_ = std::move(model);
      fingerprint_ = fingerprint;
    }
    ops_->EngineInstalled();
    Log("install");
    return kEpoch;
  }
  void LogCommit(recovery::CommitRecord::Kind kind, int64_t step,
                 int64_t epoch) override {
    Log(absl::StrCat("commit-log(", static_cast<int>(kind), ",", step, ",",
                     epoch, ")"));
  }
  void ReportMemory(const StepEngine&) const override {}
  v1::RegisterModelResponse RegisteredModel() override {
    absl::MutexLock lock(&mu_);
    v1::RegisterModelResponse response;
    response.set_committed_step(engine_->committed_step());
    response.set_epoch(kEpoch);
    response.mutable_topology()->set_world_size(world_);
    response.set_model_fingerprint(fingerprint_);
    return response;
  }

  // TrainerOpsHost.
  absl::StatusOr<std::shared_ptr<StepEngine>> Engine() override {
    absl::MutexLock lock(&mu_);
    if (engine_ == nullptr) return absl::FailedPreconditionError("no model");
    return engine_;
  }
  absl::StatusOr<int64_t> EnterReadyEpoch() override { return kEpoch; }
  int64_t CurrentEpoch() override { return kEpoch; }
  absl::Status OnCollectiveError(absl::string_view,
                                 absl::Status status) override {
    return status;
  }
  uint64_t ModelFingerprint() override {
    absl::MutexLock lock(&mu_);
    return fingerprint_;
  }
  void Committed(StepEngine&, const StepResult&, int64_t,
                 absl::Duration) override {}

  void SetReady(bool ready) {
    absl::MutexLock lock(&mu_);
    ready_ = ready;
  }
  std::shared_ptr<StepEngine> engine() {
    absl::MutexLock lock(&mu_);
    return engine_;
  }
  std::string agreement() {
    absl::MutexLock lock(&mu_);
    return agreement_;
  }
  int awaits() {
    absl::MutexLock lock(&mu_);
    return awaits_;
  }
  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int Count(const std::string& call) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const std::string& c : calls_) n += c == call ? 1 : 0;
    return n;
  }
  TrainerOps& ops() { return *ops_; }

  static constexpr int64_t kEpoch = 7;

 private:
  void Log(std::string call) {
    absl::MutexLock lock(&mu_);
    calls_.push_back(std::move(call));
  }

  comm::Store* const store_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<TrainerOps> ops_;
  absl::Mutex mu_;
  const int world_;
  const int factor_;
  bool ready_ ABSL_GUARDED_BY(mu_) = true;
  int awaits_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<StepEngine> engine_ ABSL_GUARDED_BY(mu_);
  std::optional<core::ModelConfig> model_ ABSL_GUARDED_BY(mu_);
  uint64_t fingerprint_ ABSL_GUARDED_BY(mu_) = 0;
  std::string agreement_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

// One rank: its membership, CPU backend, node and registration.
struct Rank {
  Rank(int rank, int world, int factor, comm::Store* store,
       const std::string& shm_prefix)
      : membership(rank),
        backend(ShmDir(), shm_prefix),
        node(&membership, store, world, factor),
        registration(ModelRegistrationOptions{.membership = &membership,
                                              .host = &node,
                                              .backend = &backend,
                                              .admission = admission.get(),
                                              .resume_from = ""}) {}

  static std::string ShmDir() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    return tmp != nullptr ? tmp : "/tmp";
  }

  testing::FakeMembership membership;
  CpuEngineBackend backend;
  std::shared_ptr<EngineAdmission> admission = EngineAdmission::Unlimited();
  FakeNode node;
  ModelRegistration registration;
};

class ModelRegistrationTest : public ::testing::Test {
 protected:
  std::unique_ptr<Rank> MakeRank(int rank, int world, int factor,
                                 comm::Store* store = nullptr) {
    static std::atomic<int> made{0};
    return std::make_unique<Rank>(
        rank, world, factor, store != nullptr ? store : &store_,
        absl::StrCat("reg-", getpid(), "-", made.fetch_add(1)));
  }
  static MonoTime Deadline() { return MonoNow() + absl::Seconds(10); }
  // Registers `model` on both ranks at once (one thread each).
  std::pair<absl::StatusOr<v1::RegisterModelResponse>,
            absl::StatusOr<v1::RegisterModelResponse>>
  RegisterBoth(Rank& a, const v1::ModelSpec& model_a, Rank& b,
               const v1::ModelSpec& model_b) {
    absl::StatusOr<v1::RegisterModelResponse> ra, rb;
    std::thread ta([&] {
      ra = a.registration.RegisterModel(Request(model_a), Deadline());
    });
    std::thread tb([&] {
      rb = b.registration.RegisterModel(Request(model_b), Deadline());
    });
    ta.join();
    tb.join();
    return {std::move(ra), std::move(rb)};
  }

  comm::InMemoryStore store_;
};

TEST_F(ModelRegistrationTest, TwoRanksAgreeOnTheModelAndBothInstallIt) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  auto [a, b] = RegisterBoth(*r0, Model(2), *r1, Model(2));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(a->reattached());
  EXPECT_EQ(a->epoch(), FakeNode::kEpoch);
  EXPECT_EQ(a->committed_step(), 0);
  EXPECT_NE(a->model_fingerprint(), 0u);
  EXPECT_EQ(a->model_fingerprint(), b->model_fingerprint());
  for (Rank* r : {r0.get(), r1.get()}) {
    ASSERT_NE(r->node.engine(), nullptr);
    EXPECT_EQ(r->node.engine()->config().rank, r->membership.rank());
    EXPECT_EQ(r->node.engine()->config().plan.sharding_factor(), 2);
    // Registered through the epoch's store, installed once, logged as the
    // initial state; a job starting at step 0 tells the coordinator
    // nothing.
    EXPECT_EQ(r->node.calls(), (std::vector<std::string>{"store(7)", "install",
                                                         "commit-log(0,0,7)"}));
    EXPECT_EQ(r->membership.Count("ready(7,0)"), 0);
  }
  // Both keys hold an agreement, neither marked failed.
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<std::string> key = store_.Get(core::ModelKey(r));
    ASSERT_TRUE(key.ok()) << key.status();
    EXPECT_FALSE(absl::StartsWith(*key, "failed:"));
  }
}

TEST_F(ModelRegistrationTest, AModelThatDiffersFailsOnBothRanksNamingTheField) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  auto [a, b] =
      RegisterBoth(*r0, Model(2, /*rows=*/4), *r1, Model(2, /*rows=*/6));
  ASSERT_TRUE(absl::IsFailedPrecondition(a.status())) << a.status();
  ASSERT_TRUE(absl::IsFailedPrecondition(b.status())) << b.status();
  EXPECT_TRUE(absl::StrContains(a.status().message(),
                                "model differs from rank 1's (mine vs "
                                "theirs): model.units[0].tensors[0].shape"))
      << a.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(),
                                "model differs from rank 0's (mine vs "
                                "theirs): model.units[0].tensors[0].shape"))
      << b.status();
  EXPECT_EQ(r0->node.engine(), nullptr);
  EXPECT_EQ(r1->node.engine(), nullptr);
  EXPECT_EQ(r0->node.Count("install"), 0);
  EXPECT_EQ(r1->node.Count("install"), 0);
}

TEST_F(ModelRegistrationTest,
       ARankWhoseAttemptFailedRegistersAgainAndBothAgree) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  // Rank 1 registers alone and gives up: its key is marked failed.
  absl::StatusOr<v1::RegisterModelResponse> alone =
      r1->registration.RegisterModel(Request(Model(2)),
                                     MonoNow() + absl::Milliseconds(50));
  ASSERT_TRUE(absl::IsDeadlineExceeded(alone.status())) << alone.status();
  absl::StatusOr<std::string> marked = store_.Get(core::ModelKey(1));
  ASSERT_TRUE(marked.ok()) << marked.status();
  EXPECT_TRUE(absl::StartsWith(*marked, "failed:"));
  EXPECT_EQ(r1->node.engine(), nullptr);
  // Then both register: rank 0 waits past the failed key for rank 1's
  // new attempt, in whichever order they come.
  auto [a, b] = RegisterBoth(*r0, Model(2), *r1, Model(2));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(r0->node.engine(), nullptr);
  EXPECT_NE(r1->node.engine(), nullptr);
  absl::StatusOr<std::string> now = store_.Get(core::ModelKey(1));
  ASSERT_TRUE(now.ok());
  EXPECT_FALSE(absl::StartsWith(*now, "failed:"));
}

TEST_F(ModelRegistrationTest, AStoppingDaemonEndsTheWaitForTheOtherRanks) {
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  absl::StatusOr<v1::RegisterModelResponse> waiting;
  // Rank 0 never registers; rank 1 would wait until its deadline.
  std::thread registering([&] {
    waiting = r1->registration.RegisterModel(Request(Model(2)),
                                             MonoNow() + absl::Seconds(60));
  });
  const MonoTime published_by = MonoNow() + absl::Seconds(30);
  while (!store_.Get(core::ModelKey(1)).ok() && MonoNow() < published_by) {
    absl::SleepFor(absl::Milliseconds(5));  // Poll for rank 1's key.
  }
  ASSERT_TRUE(store_.Get(core::ModelKey(1)).ok());
  r1->node.Stop();  // SIGTERM.
  registering.join();
  EXPECT_TRUE(absl::IsUnavailable(waiting.status())) << waiting.status();
  EXPECT_NE(waiting.status().message().find("the daemon is shutting down"),
            std::string::npos)
      << waiting.status();
  EXPECT_EQ(r1->node.engine(), nullptr);
  // Its key is marked failed, as after any failed attempt.
  absl::StatusOr<std::string> marked = store_.Get(core::ModelKey(1));
  ASSERT_TRUE(marked.ok());
  EXPECT_TRUE(absl::StartsWith(*marked, "failed:"));
}

TEST_F(ModelRegistrationTest, AFailedKeyFromBeforeTheAttemptIsNeverAgreement) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  ASSERT_TRUE(absl::IsDeadlineExceeded(
      r1->registration
          .RegisterModel(Request(Model(2)), MonoNow() + absl::Milliseconds(50))
          .status()));
  // Rank 1 does not come back: rank 0 waits for it to the deadline.
  absl::StatusOr<v1::RegisterModelResponse> waited =
      r0->registration.RegisterModel(Request(Model(2)),
                                     MonoNow() + absl::Milliseconds(200));
  ASSERT_TRUE(absl::IsDeadlineExceeded(waited.status())) << waited.status();
  EXPECT_TRUE(absl::StrContains(
      waited.status().message(),
      "rank 1's last registration failed and it has not registered again"))
      << waited.status();
  EXPECT_EQ(r0->node.engine(), nullptr);
}

// Rank 0's daemon died after the ranks agreed and before it installed the
// model (an OOM kill during the allocation); rank 1 installed it and never
// registers again. Rank 0's replacement registers in a later epoch (a
// store of its own): it agrees with what rank 1 publishes there, and
// without that it would wait for rank 1 until its deadline.
TEST_F(ModelRegistrationTest,
       ARankRegisteringInALaterEpochAgreesWithWhatAHolderPublished) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  auto [a, b] = RegisterBoth(*r0, Model(2), *r1, Model(2));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // The installed agreement is the one rank 1 published when it agreed.
  absl::StatusOr<std::string> published = store_.Get(core::ModelKey(1));
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(r1->node.agreement(), *published);

  comm::InMemoryStore unpublished;  // A later epoch's, rank 1 silent.
  std::unique_ptr<Rank> waits = MakeRank(0, 2, 2, &unpublished);
  absl::StatusOr<v1::RegisterModelResponse> alone =
      waits->registration.RegisterModel(Request(Model(2)),
                                        MonoNow() + absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(alone.status())) << alone.status();
  // Nothing to publish publishes nothing.
  ModelRegistration::PublishHeld(unpublished, 1, "", 8);
  EXPECT_TRUE(absl::IsNotFound(unpublished.Get(core::ModelKey(1)).status()));

  comm::InMemoryStore later;
  ModelRegistration::PublishHeld(later, 1, r1->node.agreement(), 8);
  std::unique_ptr<Rank> replacement = MakeRank(0, 2, 2, &later);
  absl::StatusOr<v1::RegisterModelResponse> registered =
      replacement->registration.RegisterModel(Request(Model(2)), Deadline());
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->model_fingerprint(), b->model_fingerprint());
  EXPECT_NE(replacement->node.engine(), nullptr);

  // A replacement registering another model is told whose it differs from.
  comm::InMemoryStore other;
  ModelRegistration::PublishHeld(other, 1, r1->node.agreement(), 9);
  std::unique_ptr<Rank> wrong = MakeRank(0, 2, 2, &other);
  absl::StatusOr<v1::RegisterModelResponse> refused =
      wrong->registration.RegisterModel(Request(Model(2, /*rows=*/6)),
                                        Deadline());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "model differs from rank 1's"))
      << refused.status();
  EXPECT_EQ(wrong->node.engine(), nullptr);
}

TEST_F(ModelRegistrationTest, ReattachWithTheSameModelReleasesWhatTheOldHeld) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 1, 1);
  absl::StatusOr<v1::RegisterModelResponse> first =
      r0->registration.RegisterModel(Request(Model(1)), Deadline());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->reattached());
  std::shared_ptr<StepEngine> engine = r0->node.engine();
  // The old trainer gathered a unit (a collective) and went away.
  v1::GatherRequest gather;
  gather.set_unit(0);
  gather.set_pass(v1::PASS_FORWARD);
  ASSERT_TRUE(r0->node.ops().Gather(gather, Deadline()).ok());
  EXPECT_EQ(r0->node.ops().HeldUnits(), std::vector<int>{0});

  absl::StatusOr<v1::RegisterModelResponse> again =
      r0->registration.RegisterModel(Request(Model(1)), Deadline());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->reattached());
  EXPECT_EQ(again->model_fingerprint(), first->model_fingerprint());
  EXPECT_EQ(r0->node.engine(), engine);  // The same engine.
  EXPECT_EQ(r0->node.Count("install"), 1);
  EXPECT_TRUE(r0->node.ops().HeldUnits().empty());
  EXPECT_TRUE(r0->node.ops().Idle());
  // It left a step half-way: the epoch is abandoned, once.
  EXPECT_EQ(r0->node.Count(
                "abandon(7): the trainer re-attached in the middle of a step"),
            1);
  // A third trainer finds nothing under way: no abandon.
  ASSERT_TRUE(
      r0->registration.RegisterModel(Request(Model(1)), Deadline()).ok());
  EXPECT_EQ(r0->node.Count(
                "abandon(7): the trainer re-attached in the middle of a step"),
            1);
}

TEST_F(ModelRegistrationTest, ReattachWithAnotherModelIsFailedPrecondition) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 1, 1);
  ASSERT_TRUE(
      r0->registration.RegisterModel(Request(Model(1)), Deadline()).ok());
  std::shared_ptr<StepEngine> engine = r0->node.engine();
  v1::GatherRequest gather;
  gather.set_unit(0);
  gather.set_pass(v1::PASS_FORWARD);
  ASSERT_TRUE(r0->node.ops().Gather(gather, Deadline()).ok());

  absl::StatusOr<v1::RegisterModelResponse> other =
      r0->registration.RegisterModel(Request(Model(1, /*rows=*/8)), Deadline());
  ASSERT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  EXPECT_TRUE(absl::StrContains(
      other.status().message(),
      "model differs from the one this daemon holds (held vs new): "
      "model.units[0].tensors[0].shape"))
      << other.status();
  // The trainer is not detached and nothing is replaced.
  EXPECT_EQ(r0->node.ops().HeldUnits(), std::vector<int>{0});
  EXPECT_EQ(r0->node.engine(), engine);
  EXPECT_EQ(r0->node.Count("install"), 1);
}

TEST_F(ModelRegistrationTest, ATransportTheBackendLacksIsInvalidArgument) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 1, 1);
  v1::RegisterModelRequest request = Request(Model(1));
  request.set_transport(v1::TRANSPORT_CUDA_IPC);
  absl::Status refused =
      r0->registration.RegisterModel(request, Deadline()).status();
  ASSERT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(absl::StartsWith(refused.message(),
                               "transport: CUDA IPC needs a CUDA device"))
      << refused;
  // Refused before waiting for an epoch.
  EXPECT_EQ(r0->node.awaits(), 0);
  EXPECT_EQ(r0->node.engine(), nullptr);
}

TEST_F(ModelRegistrationTest, BeforeTheFirstEpochIsFormedItIsUnavailable) {
  std::unique_ptr<Rank> r0 = MakeRank(0, /*world=*/0, /*factor=*/0);
  absl::Status refused =
      r0->registration.RegisterModel(Request(Model(1)), Deadline()).status();
  ASSERT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "W unknown")) << refused;
  EXPECT_EQ(r0->node.awaits(), 1);
  EXPECT_TRUE(r0->node.calls().empty());
}

TEST_F(ModelRegistrationTest, WithoutAReadyEpochTheWaitsStatusIsReturned) {
  std::unique_ptr<Rank> r0 = MakeRank(0, 1, 1);
  r0->node.SetReady(false);
  absl::Status refused =
      r0->registration.RegisterModel(Request(Model(1)), Deadline()).status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(refused)) << refused;
  EXPECT_TRUE(r0->node.calls().empty());
}

TEST_F(ModelRegistrationTest, AModelInvalidForTheJobsWorldNamesTheField) {
  // FULL_SHARD with F = 1 on W = 2.
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  absl::Status refused =
      r0->registration.RegisterModel(Request(Model(1)), Deadline()).status();
  ASSERT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_TRUE(absl::StartsWith(refused.message(),
                               "model.config.sharding_factor (1) must equal "
                               "world_size (2)"))
      << refused;
  // Refused before the ranks exchange anything.
  EXPECT_TRUE(r0->node.calls().empty());
}

TEST_F(ModelRegistrationTest, AShardingFactorTheJobDoesNotRunIsRefused) {
  // The job runs W = 2 with F = 2; the model is DDP (F = 1).
  std::unique_ptr<Rank> r0 = MakeRank(0, 2, 2);
  v1::ModelSpec ddp = Model(0);
  ddp.mutable_config()->set_strategy(v1::SHARDING_STRATEGY_NO_SHARD);
  absl::Status refused =
      r0->registration.RegisterModel(Request(ddp), Deadline()).status();
  ASSERT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_TRUE(absl::StrContains(
      refused.message(),
      "model.config.sharding_factor: resolves to 1 but the coordinator runs "
      "the job with F = 2"))
      << refused;
  EXPECT_TRUE(r0->node.calls().empty());
}

TEST_F(ModelRegistrationTest, CreateEngineLaysOutTheShardOfThisRank) {
  std::unique_ptr<Rank> r1 = MakeRank(1, 2, 2);
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(Model(2));
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<StepEngine>> engine =
      r1->registration.CreateEngine(*model, 2, 2,
                                    [](int, int64_t, float* out, int64_t n) {
                                      for (int64_t i = 0; i < n; ++i) {
                                        out[i] = 3.0f;
                                      }
                                    });
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->config().rank, 1);
  EXPECT_EQ((*engine)->config().units.size(), 1u);
  EXPECT_EQ((*engine)->config().optimizer.kind, core::OptimizerKind::kSgd);
  EXPECT_EQ((*engine)->committed_step(), 0);
}

}  // namespace
}  // namespace shardd::node
