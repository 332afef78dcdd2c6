#include "daemon/node/shard_copy.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/manual_clock.h"
#include "daemon/core/model_config.h"
#include "daemon/core/shard_plan.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/proto_convert.h"
#include "daemon/node/testing/fake_membership.h"
#include "daemon/recovery/shard_stream.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

constexpr int64_t kEpoch = 5;

// The membership the copy reads: this rank (0) and its sources, rank 3 at
// "peer-3" and rank 2 at "peer-2", in epoch kEpoch.
coordinator::MembershipView Members() {
  coordinator::MembershipView v;
  v.epoch = kEpoch;
  for (int r : {0, 2, 3}) {
    v1::MemberInfo m;
    m.set_rank(r);
    m.set_peer_address(absl::StrCat("peer-", r));
    v.members.push_back(m);
  }
  return v;
}

// The failure reports the copy made.
std::vector<std::string> Reports(const testing::FakeMembership& members) {
  std::vector<std::string> reports;
  for (const std::string& call : members.calls()) {
    if (call.rfind("report(", 0) == 0) reports.push_back(call);
  }
  return reports;
}

core::ModelConfig Model() {
  core::ModelConfig model;
  core::UnitConfig unit;
  unit.name = "layer0";
  core::TensorConfig tensor;
  tensor.spec = {"weight", {3, 4}, core::DType::kFloat32};
  unit.tensors.push_back(tensor);
  model.units.push_back(unit);
  model.config.strategy = core::ShardingStrategy::kNoShard;
  model.config.sharding_factor = 1;
  model.config.optimizer = core::AdamWOptions{.lr = 0.01};
  return model;
}

class ShardCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    members_.SetView(Members());
    // The source: a one-rank engine two AdamW steps in (parameters and
    // both moments differ from a fresh engine's).
    auto source = NewEngine(Model(), 1, 1);
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
    for (int64_t step = 1; step <= 2; ++step) {
      absl::StatusOr<UnitData> slot = source_->GradientSlot(0);
      ASSERT_TRUE(slot.ok()) << slot.status();
      float* g = reinterpret_cast<float*>(slot->buffer->data() + slot->offset);
      for (int64_t i = 0; i < slot->bytes / 4; ++i) g[i] = 0.5f * (i + step);
      ASSERT_TRUE(source_->ReduceGrad(0, absl::Seconds(1)).ok());
      ASSERT_TRUE(source_->Step(step, absl::Seconds(1)).ok());
    }
  }

  absl::StatusOr<std::unique_ptr<StepEngine>> NewEngine(
      const core::ModelConfig& model, int world, int factor) {
    ++engines_created_;
    absl::StatusOr<core::ShardPlan> plan = core::ShardPlan::Create(
        world, model.config.strategy, model.config.sharding_factor);
    if (!plan.ok()) return plan.status();
    absl::StatusOr<std::vector<core::UnitLayout>> layouts =
        core::BuildLayouts(model, factor);
    if (!layouts.ok()) return layouts.status();
    OptimizerSpec optimizer;
    optimizer.kind = core::OptimizerKind::kAdamW;
    optimizer.adamw = std::get<core::AdamWOptions>(model.config.optimizer);
    EngineConfig config{.rank = 0,
                        .plan = *plan,
                        .units = *layouts,
                        .reduce_dtype = core::DType::kFloat32,
                        .optimizer = optimizer,
                        .max_grad_norm = 0,
                        .max_gathered_units = 1,
                        .exclude_from_weight_decay = {{false}}};
    return StepEngine::Create(
        std::move(config),
        [](int, int64_t, float* out, int64_t n) {
          std::fill(out, out + n, 0.0f);
        },
        heap_);
  }

  // FetchShard as the source serves it: its state in the stream, the
  // clock advanced by advance_per_message_ before each message; with
  // `corrupt`, one payload byte of data chunk corrupt_chunk_ (from 0)
  // flipped on the way.
  absl::Status Serve(
      const v1::FetchShardRequest& request,
      const std::function<absl::Status(const v1::FetchShardResponse&)>&
          on_message,
      bool corrupt) {
    ++fetches_;
    v1::ShardHeader header;
    header.set_source_rank(3);
    header.set_shard_index(request.shard_index());
    *header.mutable_model() = ProtoConvert::ModelToProto(Model());
    header.set_model_fingerprint(
        core::Fingerprint(Model(), core::InitScope::kExclude));
    header.set_epoch(request.epoch());
    header.set_step(source_->committed_step());
    header.set_optimizer_step(source_->committed_step());
    if (source_agreement_.has_value()) {
      *header.mutable_agreement() = *source_agreement_;
      header.set_registration_state(true);
    }
    std::vector<recovery::SectionSource> sources;
    for (const StepEngine::StateSection& s : source_->StateSections()) {
      recovery::SectionSource src;
      src.section.set_unit(s.unit);
      src.section.set_kind(ToSectionKind(s.kind));
      src.section.set_dtype(v1::DTYPE_FP32);
      src.section.set_numel(s.numel);
      src.section.set_byte_length(s.bytes);
      src.data = s.data;
      sources.push_back(src);
    }
    absl::StatusOr<recovery::ShardStreamWriter> writer =
        recovery::ShardStreamWriter::Create(header, sources, chunk_bytes_, 0);
    if (!writer.ok()) return writer.status();
    v1::FetchShardResponse message;
    int data_chunks = 0;
    while (writer->Next(&message)) {
      if (message.has_chunk() && !message.chunk().data().empty() &&
          data_chunks++ == corrupt_chunk_ && corrupt) {
        message.mutable_chunk()->mutable_data()->at(0) ^= 0x40;
      }
      clock_.Advance(advance_per_message_);
      if (absl::Status s = on_message(message); !s.ok()) return s;
    }
    return writer->status();
  }

  ShardCopy::Options Options() {
    ShardCopy::Options o;
    o.fetch_shard = [this](const std::string& address,
                           const v1::FetchShardRequest& request, MonoTime,
                           const auto& on_message) -> absl::Status {
      addresses_.push_back(address);
      if (address == unavailable_) {
        return absl::UnavailableError("connection refused");
      }
      return Serve(request, on_message, address == corrupt_);
    };
    o.probe_peer =
        [this](const std::string&, MonoTime,
               bool include_model) -> absl::StatusOr<v1::ProbeResponse> {
      v1::ProbeResponse probe;
      probe.set_registered(source_registered_);
      if (include_model) {
        *probe.mutable_model() = ProtoConvert::ModelToProto(Model());
        probe.set_model_fingerprint(
            core::Fingerprint(Model(), core::InitScope::kExclude));
      }
      return probe;
    };
    o.shard_memory = &recovery::ShardMemory::Host();
    o.events = &events_;
    o.clock = &clock_;
    o.membership = &members_;
    o.create_engine = [this](const core::ModelConfig& model, int world,
                             int factor) {
      return NewEngine(model, world, factor);
    };
    o.replica_group_of = [](int64_t) { return nullptr; };
    o.install = [this](std::shared_ptr<StepEngine> engine, core::ModelConfig,
                       uint64_t fingerprint, const v1::ShardHeader& header,
                       int64_t epoch) {
      const int64_t step = header.step();
      installed_ = std::move(engine);
      installed_agreement_ = header.has_agreement()
                                 ? header.agreement().SerializeAsString()
                                 : std::string();
      installed_registration_state_ = header.registration_state();
      installed_fingerprint_ = fingerprint;
      installed_step_ = step;
      installed_epoch_ = epoch;
    };
    return o;
  }

  static v1::ShardTransfer Plan(std::vector<int> sources) {
    v1::ShardTransfer plan;
    plan.set_target_rank(0);
    plan.set_shard_index(0);
    plan.set_step(2);
    for (int s : sources) plan.add_source_ranks(s);
    return plan;
  }

  std::vector<v1::RecoveryPhase> Phases() {
    std::vector<v1::TrainerEvent> out;
    events_.WaitAfter(0, MonoTime::InfinitePast(), &out);
    std::vector<v1::RecoveryPhase> phases;
    for (const v1::TrainerEvent& e : out) {
      if (e.has_recovery()) phases.push_back(e.recovery().phase());
    }
    return phases;
  }

  // The RecoveryProgress events, in order.
  std::vector<v1::RecoveryProgress> Progress() {
    std::vector<v1::TrainerEvent> out;
    events_.WaitAfter(0, MonoTime::InfinitePast(), &out);
    std::vector<v1::RecoveryProgress> progress;
    for (const v1::TrainerEvent& e : out) {
      if (e.has_recovery()) progress.push_back(e.recovery());
    }
    return progress;
  }

  // The CopyEngineReady events (bench/recovery splits a copy at them).
  std::vector<v1::CopyEngineReady> EngineReady() {
    std::vector<v1::TrainerEvent> out;
    events_.WaitAfter(0, MonoTime::InfinitePast(), &out);
    std::vector<v1::CopyEngineReady> ready;
    for (const v1::TrainerEvent& e : out) {
      if (e.has_copy_engine_ready()) ready.push_back(e.copy_engine_ready());
    }
    return ready;
  }

  memory::HeapAllocator heap_;
  // Paces the copy's progress events; still unless a test advances it.
  ManualClock clock_;
  absl::Duration advance_per_message_ = absl::ZeroDuration();
  int corrupt_chunk_ = 0;
  int64_t chunk_bytes_ = 16;
  std::unique_ptr<StepEngine> source_;
  testing::FakeMembership members_;
  EventLog events_;
  int engines_created_ = 0;
  int fetches_ = 0;
  bool source_registered_ = true;
  std::string unavailable_;
  std::string corrupt_;
  std::vector<std::string> addresses_;
  std::shared_ptr<StepEngine> installed_;
  uint64_t installed_fingerprint_ = 0;
  // What the source registered its model with (none: restored).
  std::optional<v1::ModelAgreement> source_agreement_;
  std::string installed_agreement_;
  bool installed_registration_state_ = false;
  int64_t installed_step_ = -1;
  int64_t installed_epoch_ = -1;
};

// Every state section of the two engines holds the same bytes.
void ExpectSameState(StepEngine& a, StepEngine& b) {
  const std::vector<StepEngine::StateSection> x = a.StateSections();
  const std::vector<StepEngine::StateSection> y = b.StateSections();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].bytes, y[i].bytes) << i;
    EXPECT_EQ(std::memcmp(x[i].data, y[i].data, x[i].bytes), 0)
        << "section " << i;
  }
}

TEST_F(ShardCopyTest, CopiesTheSourcesStateBitForBitAndInstallsIt) {
  ShardCopy copy(Options());
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3}), 1, 1);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(*copied);
  ASSERT_NE(installed_, nullptr);
  EXPECT_EQ(installed_step_, 2);
  EXPECT_EQ(installed_epoch_, kEpoch);
  EXPECT_EQ(installed_->committed_step(), 2);
  EXPECT_EQ(installed_fingerprint_,
            core::Fingerprint(Model(), core::InitScope::kExclude));
  ExpectSameState(*installed_, *source_);
  // The source sent no agreement (its engine came from a checkpoint).
  EXPECT_TRUE(installed_agreement_.empty());
  EXPECT_FALSE(installed_registration_state_);
  EXPECT_EQ(addresses_, std::vector<std::string>{"peer-3"});
  // The attempt's start, its bytes at 0 when the header arrived (the
  // clock stood still: no more), the end.
  EXPECT_EQ(Phases(), (std::vector<v1::RecoveryPhase>{
                          v1::RECOVERY_PHASE_TRANSFERRING_STATE,
                          v1::RECOVERY_PHASE_TRANSFERRING_STATE,
                          v1::RECOVERY_PHASE_COMPLETE}));
  EXPECT_TRUE(Reports(members_).empty());
  const std::vector<v1::CopyEngineReady> ready = EngineReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].source_rank(), 3);
  EXPECT_FALSE(ready[0].prepared_during_rendezvous());
  EXPECT_GE(ready[0].build_seconds(), 0);
}

// The replacement is handed the agreement the source's model was
// registered with, to publish in later epochs as the source does.
TEST_F(ShardCopyTest, TheSourcesAgreementIsInstalledWithTheCopy) {
  v1::ModelAgreement agreement;
  *agreement.mutable_model() = ProtoConvert::ModelToProto(Model());
  agreement.add_tensor_digests(0x1234);
  source_agreement_ = agreement;
  ShardCopy copy(Options());
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3}), 1, 1);
  ASSERT_TRUE(copied.ok()) << copied.status();
  ASSERT_NE(installed_, nullptr);
  v1::ModelAgreement installed;
  ASSERT_TRUE(installed.ParseFromString(installed_agreement_));
  EXPECT_EQ(installed.tensor_digests_size(), 1);
  EXPECT_EQ(installed.tensor_digests(0), 0x1234u);
  EXPECT_EQ(installed.model().units_size(), Model().units.size());
  // A copy of a registered state is one (the coordinator's plan relies on
  // it; PublishHeld publishes only then).
  EXPECT_TRUE(installed_registration_state_);
}

// The source's total: the COMPLETE event's (its shard's state bytes).
int64_t ShardBytes(StepEngine& engine) {
  int64_t total = 0;
  for (const StepEngine::StateSection& s : engine.StateSections()) {
    total += s.bytes;
  }
  return total;
}

TEST_F(ShardCopyTest, ByteProgressIsReportedWhileTheCopyRuns) {
  // A second per message: only the bytes (1/16 of the total) hold reports
  // back, and every 16-byte chunk of the 144 bytes is more than that.
  advance_per_message_ = absl::Seconds(1);
  ShardCopy copy(Options());
  ASSERT_TRUE(*copy.Run(kEpoch, Plan({3}), 1, 1));
  const int64_t total = ShardBytes(*source_);
  ASSERT_EQ(total, 144);
  const std::vector<v1::RecoveryProgress> progress = Progress();
  ASSERT_GE(progress.size(), 4u);
  // The attempt's start: the size is not known yet.
  EXPECT_EQ(progress.front().phase(), v1::RECOVERY_PHASE_TRANSFERRING_STATE);
  EXPECT_EQ(progress.front().bytes_total(), 0);
  EXPECT_EQ(progress.front().attempt(), 1);
  EXPECT_EQ(progress.front().source_rank(), 3);
  EXPECT_EQ(progress.back().phase(), v1::RECOVERY_PHASE_COMPLETE);
  EXPECT_EQ(progress.back().bytes_done(), total);
  EXPECT_EQ(progress.back().attempt(), 1);
  std::vector<int64_t> done;
  for (size_t i = 1; i + 1 < progress.size(); ++i) {
    const v1::RecoveryProgress& p = progress[i];
    EXPECT_EQ(p.phase(), v1::RECOVERY_PHASE_TRANSFERRING_STATE) << i;
    EXPECT_EQ(p.bytes_total(), total) << i;
    EXPECT_EQ(p.attempt(), 1) << i;
    EXPECT_EQ(p.source_rank(), 3) << i;
    done.push_back(p.bytes_done());
  }
  std::vector<int64_t> every_chunk;
  for (int64_t b = 0; b <= total; b += 16) every_chunk.push_back(b);
  EXPECT_EQ(done, every_chunk);
}

TEST_F(ShardCopyTest, SmallChunksAreReportedAtASixteenthOfTheTotal) {
  // 4-byte chunks: 37 readings; a sixteenth of 144 bytes is 9, so the
  // next report after b waits for the first chunk end >= b + 9.
  advance_per_message_ = absl::Seconds(1);
  chunk_bytes_ = 4;
  ShardCopy copy(Options());
  ASSERT_TRUE(*copy.Run(kEpoch, Plan({3}), 1, 1));
  std::vector<int64_t> done;
  for (const v1::RecoveryProgress& p : Progress()) {
    if (p.phase() == v1::RECOVERY_PHASE_TRANSFERRING_STATE &&
        p.bytes_total() > 0) {
      done.push_back(p.bytes_done());
    }
  }
  std::vector<int64_t> expected;
  for (int64_t b = 0; b <= 144; b += 12) expected.push_back(b);
  EXPECT_EQ(done, expected);
}

TEST_F(ShardCopyTest, AStillClockReportsOnlyTheStart) {
  // Every reading within the same instant: only the header's 0.
  chunk_bytes_ = 4;
  ShardCopy copy(Options());
  ASSERT_TRUE(*copy.Run(kEpoch, Plan({3}), 1, 1));
  std::vector<int64_t> done;
  for (const v1::RecoveryProgress& p : Progress()) {
    if (p.phase() == v1::RECOVERY_PHASE_TRANSFERRING_STATE &&
        p.bytes_total() > 0) {
      done.push_back(p.bytes_done());
    }
  }
  EXPECT_EQ(done, std::vector<int64_t>{0});
}

TEST_F(ShardCopyTest, ARetriedAttemptStartsItsProgressAgainFromZero) {
  advance_per_message_ = absl::Seconds(1);
  corrupt_ = "peer-3";
  corrupt_chunk_ = 4;  // Bytes [64, 80) of the first attempt.
  ShardCopy copy(Options());
  ASSERT_TRUE(*copy.Run(kEpoch, Plan({3, 2}), 1, 1));
  ExpectSameState(*installed_, *source_);
  std::vector<int64_t> first, second;
  for (const v1::RecoveryProgress& p : Progress()) {
    if (p.phase() != v1::RECOVERY_PHASE_TRANSFERRING_STATE ||
        p.bytes_total() == 0) {
      continue;
    }
    ASSERT_TRUE(p.attempt() == 1 || p.attempt() == 2) << p.attempt();
    EXPECT_EQ(p.source_rank(), p.attempt() == 1 ? 3 : 2);
    (p.attempt() == 1 ? first : second).push_back(p.bytes_done());
  }
  // The first attempt got four verified chunks before the corrupt one.
  EXPECT_EQ(first, (std::vector<int64_t>{0, 16, 32, 48, 64}));
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second.front(), 0);
  EXPECT_EQ(second.back(), 144);
  const v1::RecoveryProgress complete = Progress().back();
  EXPECT_EQ(complete.phase(), v1::RECOVERY_PHASE_COMPLETE);
  EXPECT_EQ(complete.attempt(), 2);
  EXPECT_EQ(complete.source_rank(), 2);
}

// Records the received-bytes metric as ShardCopy adds to it, and the
// transfers' results.
class RecoveryCounter : public metrics::NodeObserver {
 public:
  void RecoveryBytes(absl::string_view direction, int64_t bytes) override {
    if (direction == metrics::node_labels::kReceived) {
      received.push_back(received.empty() ? bytes : received.back() + bytes);
    }
  }
  void RecoveryTransfer(absl::string_view, bool ok) override {
    results.push_back(ok);
  }
  std::vector<int64_t> received;  // The running total after each addition.
  std::vector<bool> results;
};

TEST_F(ShardCopyTest, ReceivedBytesMetricMovesWhileTheCopyRunsAndCountsOnce) {
  // A corrupt chunk ends the first attempt after 64 verified bytes; the
  // retry copies all 144. The metric counts what was verified, as it
  // arrives, each byte once per attempt: 64 + 144.
  corrupt_ = "peer-3";
  corrupt_chunk_ = 4;
  RecoveryCounter counter;
  ShardCopy::Options options = Options();
  options.observer = &counter;
  ShardCopy copy(std::move(options));
  ASSERT_TRUE(*copy.Run(kEpoch, Plan({3, 2}), 1, 1));
  ASSERT_FALSE(counter.received.empty());
  EXPECT_EQ(counter.received.back(), 64 + 144);
  // Chunk by chunk (16 bytes), not once per attempt.
  EXPECT_EQ(counter.received.front(), 16);
  EXPECT_GE(counter.received.size(), 9u);
  EXPECT_TRUE(std::is_sorted(counter.received.begin(), counter.received.end()));
  EXPECT_EQ(counter.results, (std::vector<bool>{false, true}));
}

TEST_F(ShardCopyTest, AnEnginePreparedFromTheSourceIsFilledNotBuiltAgain) {
  ShardCopy copy(Options());
  const int before = engines_created_;
  copy.Prepare(Plan({3}), 1, 1);
  EXPECT_TRUE(copy.prepared());
  EXPECT_EQ(engines_created_, before + 1);
  ASSERT_TRUE(*copy.Run(kEpoch, Plan({3}), 1, 1));
  EXPECT_EQ(engines_created_, before + 1);  // The prepared one was used.
  EXPECT_FALSE(copy.prepared());
  ExpectSameState(*installed_, *source_);
  const std::vector<v1::CopyEngineReady> ready = EngineReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].prepared_during_rendezvous());
}

TEST_F(ShardCopyTest, APreparedEngineForAnotherTopologyIsNotUsed) {
  ShardCopy copy(Options());
  const int before = engines_created_;
  copy.Prepare(Plan({3}), 1, 1);
  // The epoch has another W (NO_SHARD: the shard is the same): the copy
  // builds an engine for it instead of filling the prepared one.
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3}), 2, 1);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(engines_created_, before + 2);
  EXPECT_EQ(installed_->config().plan.world_size(), 2);
  EXPECT_FALSE(copy.prepared());
  ExpectSameState(*installed_, *source_);
}

TEST_F(ShardCopyTest, NothingToCopyWhenTheSourcesHoldNoModel) {
  source_registered_ = false;
  ShardCopy copy(Options());
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3, 2}), 1, 1);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_FALSE(*copied);
  EXPECT_EQ(installed_, nullptr);
  EXPECT_EQ(fetches_, 0);
  EXPECT_TRUE(Reports(members_).empty());
}

TEST_F(ShardCopyTest, AFailedSourceIsSkippedForTheNext) {
  unavailable_ = "peer-3";
  ShardCopy copy(Options());
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3, 2}), 1, 1);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(addresses_, (std::vector<std::string>{"peer-3", "peer-2"}));
  ExpectSameState(*installed_, *source_);
  EXPECT_TRUE(Reports(members_).empty());  // A source succeeded.
}

TEST_F(ShardCopyTest, ACorruptCopyIsRefusedAndItsSourceReported) {
  corrupt_ = "peer-3";
  ShardCopy copy(Options());
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3}), 1, 1);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), absl::StatusCode::kDataLoss)
      << copied.status();
  EXPECT_EQ(installed_, nullptr);
  EXPECT_EQ(Reports(members_),
            std::vector<std::string>{absl::StrCat(
                "report(3,FAILURE_KIND_TRANSFER_FAILED,", kEpoch, ")")});
}

TEST_F(ShardCopyTest, WithoutPeerClientsNoCopyIsPossible) {
  ShardCopy::Options o = Options();
  o.fetch_shard = nullptr;
  ShardCopy copy(std::move(o));
  absl::StatusOr<bool> copied = copy.Run(kEpoch, Plan({3}), 1, 1);
  EXPECT_EQ(copied.status().code(), absl::StatusCode::kFailedPrecondition);
}

// The pure pieces of an attempt: the request, and whether the source's
// sections fit this rank's shard.

TEST(ShardCopyRequestTest, InlineByDefaultOverTheReplicaGroupWhenAsked) {
  v1::ShardTransfer plan;
  plan.set_shard_index(1);
  plan.set_step(42);
  const v1::FetchShardRequest inline_request =
      ShardCopy::RequestFor(kEpoch, 3, plan, /*over_replica_group=*/false);
  EXPECT_EQ(inline_request.epoch(), kEpoch);
  EXPECT_EQ(inline_request.requester_rank(), 3);
  EXPECT_EQ(inline_request.shard_index(), 1);
  EXPECT_EQ(inline_request.step(), 42);
  EXPECT_FALSE(inline_request.payload_over_replica_group());
  EXPECT_EQ(inline_request.max_chunk_bytes(), 0);  // The source's choice.
  const v1::FetchShardRequest replica_request =
      ShardCopy::RequestFor(kEpoch, 3, plan, /*over_replica_group=*/true);
  EXPECT_TRUE(replica_request.payload_over_replica_group());
  // The precomputed pieces' size, so that the source's CRCs apply.
  EXPECT_EQ(replica_request.max_chunk_bytes(), recovery::kMaxPieceBytesCap);
  EXPECT_EQ(replica_request.step(), 42);
}

TEST(ShardCopySectionTest, CountsMustMatch) {
  EXPECT_TRUE(ShardCopy::CheckSectionCount(3, 3).ok());
  const absl::Status fewer = ShardCopy::CheckSectionCount(2, 3);
  EXPECT_EQ(fewer.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fewer.message(),
            "the source sends 2 sections, this rank's shard has 3");
}

TEST(ShardCopySectionTest, UnitKindAndLengthMustMatch) {
  StepEngine::StateSection ours;
  ours.unit = 1;
  ours.kind = StepEngine::StateKind::kExpAvg;
  ours.bytes = 48;
  v1::ShardSection theirs;
  theirs.set_unit(1);
  theirs.set_kind(v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG);
  theirs.set_byte_length(48);
  EXPECT_TRUE(ShardCopy::CheckSection(theirs, ours, 4).ok());

  v1::ShardSection other_unit = theirs;
  other_unit.set_unit(2);
  const absl::Status unit = ShardCopy::CheckSection(other_unit, ours, 4);
  EXPECT_EQ(unit.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unit.message(),
            "section 4 (unit 2, SHARD_SECTION_KIND_ADAMW_EXP_AVG, 48 bytes) "
            "does not match this rank's (unit 1, 48 bytes)");

  v1::ShardSection other_kind = theirs;
  other_kind.set_kind(v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG_SQ);
  EXPECT_EQ(ShardCopy::CheckSection(other_kind, ours, 4).code(),
            absl::StatusCode::kFailedPrecondition);

  v1::ShardSection other_length = theirs;
  other_length.set_byte_length(44);
  EXPECT_EQ(ShardCopy::CheckSection(other_length, ours, 4).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardd::node
