#include "daemon/node/step_engine.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/core/mono_time.h"
#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/node/host_engine_math.h"
#include "daemon/node/testing/guarded_collective.h"
#include "daemon/node/testing/guarded_engine_math.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

using core::DType;

constexpr int kSteps = 3;

std::vector<core::UnitSpec> Model(DType dtype = DType::kFloat32) {
  // Unit 0: 18 elements (even over F = 2); unit 1: 5 elements (padded to 6).
  return {{"layer0", {{"weight", {3, 5}, dtype}, {"bias", {3}, dtype}}},
          {"layer1", {{"weight", {5}, dtype}}}};
}

float InitValue(int unit, int64_t i) {
  return 0.25f * static_cast<float>((i % 7) - 3) + 0.125f * unit;
}

// Multiples of 1/8 in [-1, 1]: every sum and average below is exact in
// fp32, so the sharded result can be compared bit for bit with the
// single-process reference whatever the reduction order.
float GradValue(int rank, int step, int unit, int64_t i) {
  return static_cast<float>(((rank * 7 + step * 3 + unit * 5 + i) % 17) - 8) /
         8.0f;
}

// Weight decay and the excluded tensors ([unit][tensor]) of a run.
struct Decay {
  double weight_decay = 0.0;
  std::vector<std::vector<bool>> excluded;
};

EngineConfig Config(int w, int f, int rank, int64_t k, const Decay& decay = {},
                    DType dtype = DType::kFloat32) {
  std::vector<core::UnitLayout> units;
  for (const core::UnitSpec& spec : Model(dtype)) {
    units.push_back(*core::UnitLayout::Create(spec, f));
  }
  OptimizerSpec optimizer;
  optimizer.kind = core::OptimizerKind::kAdamW;
  optimizer.adamw.lr = 0.01;
  optimizer.adamw.weight_decay = decay.weight_decay;
  return EngineConfig{
      .rank = rank,
      .plan =
          *core::ShardPlan::Create(w, core::ShardingStrategy::kHybridShard, f),
      .units = std::move(units),
      .reduce_dtype = dtype,
      .optimizer = optimizer,
      .max_grad_norm = 0.25,  // Small enough to clip every step.
      .max_gathered_units = k,
      .exclude_from_weight_decay = decay.excluded};
}

void Init(int unit, int64_t offset, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = InitValue(unit, offset + i);
}

// The unsharded reference: every rank's gradient averaged, the norm over
// the whole model, AdamW on whole units.
std::vector<std::vector<float>> Reference(int w, const Decay& decay = {}) {
  const auto model = Model();
  std::vector<std::vector<float>> params, m, v;
  for (size_t u = 0; u < model.size(); ++u) {
    const int64_t n = core::UnitLayout::Create(model[u], 1)->numel();
    params.emplace_back(n);
    Init(u, 0, params.back().data(), n);
    m.emplace_back(n, 0.0f);
    v.emplace_back(n, 0.0f);
  }
  core::AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = decay.weight_decay;
  auto adamw = *core::AdamW::Create(o);
  o.weight_decay = 0.0;
  auto no_decay = *core::AdamW::Create(o);
  auto clipper = *core::GradClipper::Create(0.25);
  for (int step = 1; step <= kSteps; ++step) {
    std::vector<std::vector<float>> grads;
    core::GradNormPartial partial;
    for (size_t u = 0; u < params.size(); ++u) {
      std::vector<float> g(params[u].size(), 0.0f);
      for (size_t i = 0; i < g.size(); ++i) {
        float sum = 0;
        for (int r = 0; r < w; ++r) sum += GradValue(r, step, u, i);
        g[i] = sum / static_cast<float>(w);
      }
      EXPECT_TRUE(
          core::GradClipper::Accumulate(g.data(), g.size(), &partial).ok());
      grads.push_back(std::move(g));
    }
    const std::vector<core::GradNormPartial> partials = {partial};
    auto clip = clipper.Finish(partials);
    EXPECT_TRUE(clip.ok());
    EXPECT_LT(clip->scale, 1.0f);
    for (size_t u = 0; u < params.size(); ++u) {
      // Tensor by tensor, as PyTorch's parameter groups would.
      for (size_t t = 0; t < model[u].tensors.size(); ++t) {
        const core::TensorView& view =
            core::UnitLayout::Create(model[u], 1)->tensors()[t];
        const bool excluded = u < decay.excluded.size() &&
                              t < decay.excluded[u].size() &&
                              decay.excluded[u][t];
        const int64_t at = view.offset;
        EXPECT_TRUE((excluded ? no_decay : adamw)
                        .Update(step, clip->scale, grads[u].data() + at,
                                params[u].data() + at, m[u].data() + at,
                                v[u].data() + at, view.numel, DType::kFloat32,
                                nullptr)
                        .ok());
      }
    }
  }
  return params;
}

// Rank r of a FULL_SHARD job of w ranks in this process (F = W): the shard
// group of all ranks and its own one-rank replica group.
struct Groups {
  std::shared_ptr<comm::Collective> shard;
  std::shared_ptr<comm::Collective> replica;
};

absl::StatusOr<Groups> ConnectFullShard(int r, int w, comm::Store& store) {
  comm::GlooCollectiveOptions so{
      .rank = r, .size = w, .epoch = 1, .group = "shard/0"};
  comm::GlooCollectiveOptions ro{
      .rank = 0, .size = 1, .epoch = 1, .group = absl::StrCat("replica/", r)};
  auto shard = comm::CreateGlooCollective(so, store);
  if (!shard.ok()) return shard.status();
  auto replica = comm::CreateGlooCollective(ro, store);
  if (!replica.ok()) return replica.status();
  return Groups{std::move(*shard), std::move(*replica)};
}

// How RunRank runs a rank.
struct RunOptions {
  Decay decay;
  // Engine memory in a GuardedArena (not host-addressable, as a GPU's)
  // with its EngineMath and communicators, instead of the heap.
  bool device = false;
  DType dtype = DType::kFloat32;  // Parameters and gradients.
  // Each step's gradient arrives as two micro-batches (the first with
  // accumulate_only), summing to the same gradient.
  bool micro_batches = false;
  // With device: plan no communicator scratch (so none is reserved).
  bool no_scratch_in_plan = false;
  // The ranks of odd shard groups reduce the units first to last, the
  // others last to first (ranks of one shard group must agree: its
  // reduce-scatters are collectives in call order).
  bool mixed_reduce_order = false;
  // G: gradient slots (1: every reduce-scatter waited for in ReduceGrad).
  int64_t reducing_units = 2;
};

// One rank: communicators, engine, kSteps steps, then the gathered result.
struct RankResult {
  absl::Status status;
  std::vector<std::vector<float>> gathered;  // Per unit, real elements.
  std::vector<std::vector<float>> master;    // Per unit, this rank's shard.
  std::vector<float> exp_avg;                // Unit 0, whole (GatherState).
  int64_t held = -1;
  int64_t planned = -2;
  int64_t planned_comm_scratch = -1;
  int64_t held_comm_scratch = -2;
  absl::Status exhausted;  // Gathering past K.
  int64_t device_calls = 0;
};

// Grad values as `dtype` bytes (bf16/fp16 hold multiples of 1/8 exactly).
std::vector<uint8_t> GradBytes(int rank, int step, int unit, int64_t n,
                               DType dtype, float scale) {
  std::vector<uint8_t> out(static_cast<size_t>(n * core::DTypeSize(dtype)));
  for (int64_t i = 0; i < n; ++i) {
    const float v = scale * GradValue(rank, step, unit, i);
    if (dtype == DType::kFloat32) {
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      const uint16_t h = dtype == DType::kBFloat16 ? core::FloatToBFloat16(v)
                                                   : core::FloatToHalf(v);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

std::vector<float> ToFloats(const uint8_t* p, int64_t n, DType dtype) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kFloat32) {
      std::memcpy(&out[i], p + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      out[i] = dtype == DType::kBFloat16 ? core::BFloat16ToFloat(h)
                                         : core::HalfToFloat(h);
    }
  }
  return out;
}

RankResult RunRank(int w, int f, int rank, comm::Store& store,
                   const RunOptions& run = {}) {
  RankResult out;
  auto fail = [&](absl::Status s) {
    out.status = s;
    return out;
  };
  comm::GlooCollectiveOptions so{.rank = rank % f,
                                 .size = f,
                                 .epoch = 1,
                                 .group = absl::StrCat("shard/", rank / f)};
  comm::GlooCollectiveOptions ro{.rank = rank / f,
                                 .size = w / f,
                                 .epoch = 1,
                                 .group = absl::StrCat("replica/", rank % f)};
  auto shard = comm::CreateGlooCollective(so, store);
  if (!shard.ok()) return fail(shard.status());
  auto replica = comm::CreateGlooCollective(ro, store);
  if (!replica.ok()) return fail(replica.status());
  memory::HeapAllocator heap;
  std::shared_ptr<memory::testing::GuardedArena> arena;
  std::shared_ptr<EngineMath> math = HostEngineMath::Get();
  std::shared_ptr<testing::GuardedEngineMath> device_math;
  std::shared_ptr<comm::Collective> shard_group = std::move(*shard);
  std::shared_ptr<comm::Collective> replica_group = std::move(*replica);
  if (run.device) {
    auto a = memory::testing::GuardedArena::Create(int64_t{16} << 20);
    if (!a.ok()) return fail(a.status());
    arena = std::move(*a);
    device_math = std::make_shared<testing::GuardedEngineMath>(arena);
    math = device_math;
    shard_group =
        std::make_shared<testing::GuardedCollective>(shard_group, arena);
    replica_group =
        std::make_shared<testing::GuardedCollective>(replica_group, arena);
  }
  memory::BufferAllocator& allocator =
      run.device ? static_cast<memory::BufferAllocator&>(*arena) : heap;
  EngineConfig config = Config(w, f, rank, 1, run.decay, run.dtype);
  config.max_reducing_units = run.reducing_units;
  // The guarded communicators keep scratch as NCCL's fixed order does.
  if (run.device && !run.no_scratch_in_plan) {
    config.comm_scratch = core::CommScratch::kNcclFixedOrder;
  }
  auto engine =
      StepEngine::Create(std::move(config), Init, allocator, allocator, math);
  if (!engine.ok()) return fail(engine.status());
  StepEngine& e = **engine;
  e.SetCommunicators(shard_group, replica_group);
  out.held = e.held_bytes();
  out.planned = e.planned_memory().total_bytes;
  out.planned_comm_scratch = e.planned_memory().comm_scratch_bytes;
  out.held_comm_scratch = e.held_memory().comm_scratch_bytes;
  const absl::Duration timeout = absl::Seconds(30);
  const bool forward_order = run.mixed_reduce_order && (rank / f) % 2 == 1;
  for (int step = 1; step <= kSteps; ++step) {
    for (int i = 0; i < 2; ++i) {
      const int u = forward_order || !run.mixed_reduce_order ? i : 1 - i;
      auto gathered = e.Gather(u, timeout);
      if (!gathered.ok()) return fail(gathered.status());
      if (step == 1 && i == 0) {
        // K = 1: a second unit cannot be gathered before a release.
        out.exhausted = e.Gather(1 - u, timeout).status();
      }
      if (absl::Status s = e.Release(u); !s.ok()) return fail(s);
      auto slot = e.GradientSlot(u);
      if (!slot.ok()) return fail(slot.status());
      // The trainer's write, through the engine's math: a GPU trainer's
      // kernel, here a copy.
      const int64_t n = e.config().units[u].numel();
      const int passes = run.micro_batches ? 2 : 1;
      for (int pass = 0; pass < passes; ++pass) {
        const std::vector<uint8_t> g = GradBytes(
            rank, step, u, n, run.dtype, run.micro_batches ? 0.5f : 1.0f);
        if (absl::Status s = e.math().Upload(
                slot->buffer->data() + slot->offset, g.data(), g.size());
            !s.ok()) {
          return fail(s);
        }
        if (absl::Status s =
                e.ReduceGrad(u, timeout,
                             /*accumulate_only=*/pass + 1 < passes);
            !s.ok()) {
          return fail(s);
        }
      }
    }
    auto result = e.Step(step, timeout);
    if (!result.ok()) return fail(result.status());
  }
  for (int u = 0; u < 2; ++u) {
    auto gathered = e.Gather(u, timeout);
    if (!gathered.ok()) return fail(gathered.status());
    const int64_t n = e.config().units[u].numel();
    std::vector<uint8_t> bytes(static_cast<size_t>(gathered->bytes));
    if (absl::Status s = e.math().Download(
            bytes.data(), gathered->buffer->data() + gathered->offset,
            gathered->bytes);
        !s.ok()) {
      return fail(s);
    }
    out.gathered.push_back(ToFloats(bytes.data(), n, gathered->dtype));
    if (absl::Status s = e.Release(u); !s.ok()) return fail(s);
    auto master = e.MasterShard(u);
    if (!master.ok()) return fail(master.status());
    out.master.push_back(*std::move(master));
  }
  auto exp_avg = e.GatherState(0, StepEngine::StateKind::kExpAvg, timeout);
  if (!exp_avg.ok()) return fail(exp_avg.status());
  out.exp_avg = *std::move(exp_avg);
  if (device_math != nullptr) out.device_calls = device_math->calls();
  return out;
}

TEST(StepEngineTest, HybridShardStepsEqualTheUnshardedReferenceBitForBit) {
  constexpr int kW = 4, kF = 2;
  comm::InMemoryStore store;
  std::vector<RankResult> results(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] { results[r] = RunRank(kW, kF, r, store); });
  }
  for (auto& t : threads) t.join();
  const auto reference = Reference(kW);
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(results[r].status.ok())
        << "rank " << r << ": " << results[r].status;
    EXPECT_EQ(results[r].held, results[r].planned) << "rank " << r;
    EXPECT_EQ(results[r].exhausted.code(),
              absl::StatusCode::kResourceExhausted);
    ASSERT_EQ(results[r].gathered.size(), reference.size());
    for (size_t u = 0; u < reference.size(); ++u) {
      ASSERT_EQ(results[r].gathered[u].size(), reference[u].size());
      EXPECT_EQ(std::memcmp(results[r].gathered[u].data(), reference[u].data(),
                            reference[u].size() * sizeof(float)),
                0)
          << "rank " << r << " unit " << u;
    }
  }
}

std::vector<RankResult> RunAll(int w, int f, const RunOptions& run) {
  comm::InMemoryStore store;
  std::vector<RankResult> results(w);
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r) {
    threads.emplace_back([&, r] { results[r] = RunRank(w, f, r, store, run); });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Ranks whose trainers reduce the units in different orders still
// all-reduce the same gradient shards together: ReduceGrad starts the
// replica all-reduces last unit first, whatever order they came in.
TEST(StepEngineTest, ReductionOrderDiffersBetweenReplicasBitForBit) {
  RunOptions run;
  run.mixed_reduce_order = true;
  for (const auto& [w, f] : {std::pair{2, 1}, std::pair{4, 2}}) {
    const std::vector<RankResult> results = RunAll(w, f, run);
    const auto reference = Reference(w);
    for (int r = 0; r < w; ++r) {
      ASSERT_TRUE(results[r].status.ok())
          << "W " << w << " rank " << r << ": " << results[r].status;
      for (size_t u = 0; u < reference.size(); ++u) {
        ASSERT_EQ(results[r].gathered[u].size(), reference[u].size());
        EXPECT_EQ(
            std::memcmp(results[r].gathered[u].data(), reference[u].data(),
                        reference[u].size() * sizeof(float)),
            0)
            << "W " << w << " rank " << r << " unit " << u;
      }
    }
  }
}

// G = 1 (no reduce-scatter in flight after its ReduceGrad: one gradient
// slot) and G = 2 (the default: the next unit's gradient is written while
// the last one's reduce-scatter runs) reach the same bits with the memory
// each plans.
TEST(StepEngineTest, OneOrTwoGradientSlotsGiveTheSameBitsAndPlannedMemory) {
  for (const int64_t g : {1, 2}) {
    RunOptions run;
    run.reducing_units = g;
    const std::vector<RankResult> results = RunAll(4, 4, run);
    const auto reference = Reference(4);
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(results[r].status.ok())
          << "G " << g << " rank " << r << ": " << results[r].status;
      EXPECT_EQ(results[r].held, results[r].planned) << "G " << g;
      for (size_t u = 0; u < reference.size(); ++u) {
        EXPECT_EQ(
            std::memcmp(results[r].gathered[u].data(), reference[u].data(),
                        reference[u].size() * sizeof(float)),
            0)
            << "G " << g << " rank " << r << " unit " << u;
      }
    }
  }
  // The second slot costs one more of the largest unit's gradient.
  auto planned = [](int64_t g) {
    EngineConfig config = Config(4, 4, 0, 1, {}, DType::kFloat32);
    config.max_reducing_units = g;
    memory::HeapAllocator heap;
    auto engine = StepEngine::Create(std::move(config), Init, heap);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? (*engine)->planned_memory().unsharded_gradient_bytes
                       : -1;
  };
  EXPECT_EQ(planned(1),
            20 * 4);  // Unit 0: 18 elements padded to 20 over F = 4.
  EXPECT_EQ(planned(2), 2 * 20 * 4);
}

// A reduce-scatter still in flight when its ReduceGrad returned, whose
// peer never takes part: the failure comes back from Step, and nothing of
// the step is applied.
TEST(StepEngineTest, AReduceScatterThatFailsLaterFailsTheStepUnapplied) {
  constexpr int kW = 2;
  comm::InMemoryStore store;
  absl::Status reduced, stepped, setup;
  int64_t committed = -1;
  std::vector<float> master_before, master_after;
  absl::Notification rank0_done;
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] {
      auto groups = ConnectFullShard(r, kW, store);
      if (!groups.ok()) {
        if (r == 0) setup = groups.status();
        if (r == 1) rank0_done.WaitForNotification();
        return;
      }
      if (r == 1) {
        // The peer's process dies: its communicator goes, sockets closed.
        groups->shard->Abort("peer gone");
        groups->shard.reset();
        rank0_done.WaitForNotification();
        return;
      }
      memory::HeapAllocator heap;
      EngineConfig config = Config(kW, kW, r, 1, {}, DType::kFloat32);
      config.max_reducing_units = 2;
      auto engine = StepEngine::Create(std::move(config), Init, heap);
      if (!engine.ok()) {
        setup = engine.status();
        rank0_done.Notify();
        return;
      }
      StepEngine& e = **engine;
      e.SetCommunicators(groups->shard, groups->replica);
      master_before = *e.MasterShard(1);
      const absl::Duration timeout = absl::Seconds(5);
      auto slot = e.GradientSlot(1);
      const int64_t n = e.config().units[1].numel();
      const std::vector<uint8_t> g = GradBytes(r, 1, 1, n, DType::kFloat32, 1);
      std::memcpy(slot->buffer->data() + slot->offset, g.data(), g.size());
      reduced = e.ReduceGrad(1, timeout);
      stepped = e.Step(1, timeout).status();
      committed = e.committed_step();
      master_after = *e.MasterShard(1);
      rank0_done.Notify();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(setup.ok()) << setup;
  // Issued, not waited for: ReduceGrad could not know yet.
  EXPECT_TRUE(reduced.ok()) << reduced;
  EXPECT_FALSE(stepped.ok());
  EXPECT_TRUE(absl::IsUnavailable(stepped) ||
              absl::IsDeadlineExceeded(stepped) || absl::IsAborted(stepped))
      << stepped;
  EXPECT_EQ(committed, 0);
  EXPECT_EQ(master_after, master_before);
}

// The member's re-join reads the pending step from its heartbeat thread
// while a collective with a peer that stopped answering holds the engine;
// it must not wait for that collective to time out (it held the node's
// lock meanwhile, and the epoch driver that would abort the collective
// waited for that lock: 23 s in partition_replace_test).
TEST(StepEngineTest, PendingAndCommittedStepDoNotWaitForACollective) {
  constexpr int kW = 2;
  comm::InMemoryStore store;
  absl::Status setup, gathered;
  absl::Notification rank0_done;
  std::atomic<bool> gather_returned{false};
  std::atomic<bool> reader_saw_it_return{false};
  int reads = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] {
      auto groups = ConnectFullShard(r, kW, store);
      if (!groups.ok()) {
        if (r == 0) setup = groups.status();
        if (r == 1) rank0_done.WaitForNotification();
        return;
      }
      if (r == 1) {
        // Connected, and silent: never joins the all-gather.
        rank0_done.WaitForNotification();
        return;
      }
      memory::HeapAllocator heap;
      auto engine = StepEngine::Create(
          Config(kW, kW, r, 1, {}, DType::kFloat32), Init, heap);
      if (!engine.ok()) {
        setup = engine.status();
        rank0_done.Notify();
        return;
      }
      StepEngine& e = **engine;
      e.SetCommunicators(groups->shard, groups->replica);
      std::thread reader([&] {
        // For 1.5 s of the 20 s all-gather: each read returns at once.
        const MonoTime until = MonoNow() + absl::Milliseconds(1500);
        while (MonoNow() < until) {
          (void)e.pending_step();
          (void)e.committed_step();
          ++reads;
          if (gather_returned.load()) reader_saw_it_return = true;
        }
        groups->shard->Abort("the test is done");
      });
      gathered = e.Gather(0, absl::Seconds(20)).status();
      gather_returned = true;
      reader.join();
      rank0_done.Notify();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(setup.ok()) << setup;
  EXPECT_FALSE(reader_saw_it_return.load());
  EXPECT_GT(reads, 0);
  // Ended by the abort, not by its timeout.
  EXPECT_FALSE(gathered.ok());
}

// The replica all-reduce of a unit's gradient runs before Step, as soon as
// the unit and the ones after it are reduced (DDP's overlap of
// communication with the backward pass); Step only waits for it.
TEST(StepEngineTest, ReplicaAllReducesStartAtReduceGradLastUnitFirst) {
  constexpr int kW = 2;
  comm::InMemoryStore store;
  // Per rank: AllReduce calls run after unit 0 alone was reduced, after
  // unit 1 too, and after Step.
  std::vector<std::array<int64_t, 3>> calls(kW);
  std::vector<absl::Status> statuses(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](absl::Status s) { statuses[r] = std::move(s); };
      comm::GlooCollectiveOptions so{
          .rank = 0, .size = 1, .epoch = 1, .group = absl::StrCat("s/", r)};
      comm::GlooCollectiveOptions ro{
          .rank = r, .size = kW, .epoch = 1, .group = "replica"};
      auto shard = comm::CreateGlooCollective(so, store);
      if (!shard.ok()) return fail(shard.status());
      auto replica = comm::CreateGlooCollective(ro, store);
      if (!replica.ok()) return fail(replica.status());
      std::shared_ptr<comm::Collective> replica_group = std::move(*replica);
      memory::HeapAllocator heap;
      auto engine = StepEngine::Create(Config(kW, 1, r, 1, {}, DType::kFloat32),
                                       Init, heap, heap, HostEngineMath::Get());
      if (!engine.ok()) return fail(engine.status());
      StepEngine& e = **engine;
      e.SetCommunicators(std::move(*shard), replica_group);
      const absl::Duration timeout = absl::Seconds(30);
      // A barrier behind the issued operations: when it is done, so are
      // they (a communicator runs its operations in issue order).
      auto settled = [&]() -> absl::StatusOr<int64_t> {
        if (absl::Status s = replica_group->Barrier()->Wait(); !s.ok()) {
          return s;
        }
        return replica_group->Stats().of(comm::OpKind::kAllReduce).calls;
      };
      for (int stage = 0; stage < 2; ++stage) {
        const int u = stage;  // First to last: unit 1 goes last.
        auto slot = e.GradientSlot(u);
        if (!slot.ok()) return fail(slot.status());
        const int64_t n = e.config().units[u].numel();
        const std::vector<uint8_t> g =
            GradBytes(r, 1, u, n, DType::kFloat32, 1.0f);
        std::memcpy(slot->buffer->data() + slot->offset, g.data(), g.size());
        if (absl::Status s = e.ReduceGrad(u, timeout); !s.ok()) return fail(s);
        absl::StatusOr<int64_t> c = settled();
        if (!c.ok()) return fail(c.status());
        calls[r][stage] = *c;
      }
      if (auto stepped = e.Step(1, timeout); !stepped.ok()) {
        return fail(stepped.status());
      }
      absl::StatusOr<int64_t> c = settled();
      if (!c.ok()) return fail(c.status());
      calls[r][2] = *c;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    // Unit 0 alone: its all-reduce waits for unit 1's, which goes first.
    EXPECT_EQ(calls[r][0], 0) << "rank " << r;
    // Both reduced: both all-reduces ran before Step was called.
    EXPECT_EQ(calls[r][1], 2) << "rank " << r;
    // Step issued none of its own.
    EXPECT_EQ(calls[r][2], 2) << "rank " << r;
  }
}

// The engine with its memory where the host cannot touch it (as on a GPU):
// every copy and computation went through its EngineMath and every
// collective through device buffers, and the result is the reference's,
// bit for bit, with exactly the planned memory.
TEST(StepEngineTest, DeviceMemoryEngineEqualsTheUnshardedReferenceBitForBit) {
  constexpr int kW = 4, kF = 2;
  const std::vector<RankResult> results =
      RunAll(kW, kF, {.decay = {}, .device = true});
  const auto reference = Reference(kW);
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(results[r].status.ok())
        << "rank " << r << ": " << results[r].status;
    EXPECT_EQ(results[r].held, results[r].planned) << "rank " << r;
    // The communicators' scratch is planned and reserved up front.
    EXPECT_GT(results[r].planned_comm_scratch, 4) << "rank " << r;
    EXPECT_EQ(results[r].held_comm_scratch, results[r].planned_comm_scratch)
        << "rank " << r;
    EXPECT_GT(results[r].device_calls, 0) << "rank " << r;
    ASSERT_EQ(results[r].gathered.size(), reference.size());
    for (size_t u = 0; u < reference.size(); ++u) {
      ASSERT_EQ(results[r].gathered[u].size(), reference[u].size());
      EXPECT_EQ(std::memcmp(results[r].gathered[u].data(), reference[u].data(),
                            reference[u].size() * sizeof(float)),
                0)
          << "rank " << r << " unit " << u;
    }
  }
}

// bf16 parameters and gradients (the low-precision copies, rounded
// accumulation of micro-batches): the device-memory engine ends exactly
// where the host engine does, in its gathered parameters, master shards and
// optimizer state.
// Issue #28 (6): without the reservation, a device reduction would allocate
// its scratch inside the collective (after peers may have issued it). The
// guarded communicators refuse that, so a plan that forgot the scratch
// fails its first reduce-scatter instead of passing silently.
TEST(StepEngineTest, DeviceReductionWithoutReservedScratchIsRefused) {
  constexpr int kW = 2, kF = 2;
  RunOptions run;
  run.device = true;
  run.no_scratch_in_plan = true;
  const std::vector<RankResult> results = RunAll(kW, kF, run);
  for (int r = 0; r < kW; ++r) {
    EXPECT_EQ(results[r].status.code(), absl::StatusCode::kFailedPrecondition)
        << "rank " << r << ": " << results[r].status;
    EXPECT_EQ(results[r].planned_comm_scratch, 0);
  }
}

TEST(StepEngineTest,
     DeviceMemoryEngineEqualsTheHostEngineWithBf16MicroBatches) {
  constexpr int kW = 4, kF = 2;
  const RunOptions host{.decay = {},
                        .device = false,
                        .dtype = DType::kBFloat16,
                        .micro_batches = true};
  RunOptions device = host;
  device.device = true;
  const std::vector<RankResult> on_host = RunAll(kW, kF, host);
  const std::vector<RankResult> on_device = RunAll(kW, kF, device);
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() &&
           std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(on_host[r].status.ok())
        << "rank " << r << ": " << on_host[r].status;
    ASSERT_TRUE(on_device[r].status.ok())
        << "rank " << r << ": " << on_device[r].status;
    EXPECT_EQ(on_device[r].held, on_device[r].planned) << "rank " << r;
    ASSERT_EQ(on_device[r].gathered.size(), 2u);
    for (size_t u = 0; u < 2; ++u) {
      EXPECT_TRUE(same(on_host[r].gathered[u], on_device[r].gathered[u]))
          << "rank " << r << " unit " << u;
      EXPECT_TRUE(same(on_host[r].master[u], on_device[r].master[u]))
          << "rank " << r << " unit " << u;
    }
    EXPECT_TRUE(same(on_host[r].exp_avg, on_device[r].exp_avg)) << r;
    // Three steps moved the parameters away from their initial values.
    EXPECT_NE(on_device[r].master[0][0], InitValue(0, (r % kF) * 9));
  }
}

// W = F = 2: a released unit is answered from its slot without an
// AllGather; released with reshard it is all-gathered again, with the same
// values.
// Weight decay with unit 0's weight excluded (elements 0..14 of 18: it
// straddles the F = 2 shard boundary at 9, and shard 1 also holds the
// decayed bias, 15..17): the parameters equal the reference's, which
// updates tensor by tensor with and without decay, bit for bit; the weight
// differs from decaying everything, the bias does not.
TEST(StepEngineTest, ExcludedTensorsSkipWeightDecayBitForBit) {
  constexpr int kW = 2, kF = 2;
  const Decay decay{0.5, {{true, false}, {false}}};
  comm::InMemoryStore store;
  std::vector<RankResult> results(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back(
        [&, r] { results[r] = RunRank(kW, kF, r, store, {.decay = decay}); });
  }
  for (auto& t : threads) t.join();
  const auto reference = Reference(kW, decay);
  const auto all_decay = Reference(kW, Decay{0.5, {}});
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(results[r].status.ok())
        << "rank " << r << ": " << results[r].status;
    for (size_t u = 0; u < reference.size(); ++u) {
      ASSERT_EQ(results[r].gathered[u].size(), reference[u].size());
      EXPECT_EQ(std::memcmp(results[r].gathered[u].data(), reference[u].data(),
                            reference[u].size() * sizeof(float)),
                0)
          << "rank " << r << " unit " << u;
    }
    for (int64_t i : {0, 8, 9, 14}) {  // Both shards of the weight.
      EXPECT_NE(results[r].gathered[0][i], all_decay[0][i]) << i;
    }
    EXPECT_EQ(std::memcmp(results[r].gathered[0].data() + 15,
                          all_decay[0].data() + 15, 3 * sizeof(float)),
              0);
  }
}

TEST(StepEngineTest, ReshardOnReleaseGathersTheUnitAgain) {
  constexpr int kW = 2;
  comm::InMemoryStore store;
  struct Seen {
    absl::Status status;
    std::vector<int64_t> all_gathers;  // AllGather calls after each Gather.
    std::vector<std::vector<float>> values;
  };
  std::vector<Seen> seen(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] {
      Seen& out = seen[r];
      auto groups = ConnectFullShard(r, kW, store);
      if (!groups.ok()) {
        out.status = groups.status();
        return;
      }
      std::shared_ptr<comm::Collective> group = groups->shard;
      memory::HeapAllocator heap;
      auto engine = StepEngine::Create(Config(kW, kW, r, 2), Init, heap);
      if (!engine.ok()) {
        out.status = engine.status();
        return;
      }
      StepEngine& e = **engine;
      e.SetCommunicators(group, groups->replica);
      // Gather, release (cached), gather, release with reshard, gather.
      for (int i = 0; i < 3; ++i) {
        auto gathered = e.Gather(0, absl::Seconds(30));
        if (!gathered.ok()) {
          out.status = gathered.status();
          return;
        }
        out.all_gathers.push_back(
            group->Stats().of(comm::OpKind::kAllGather).calls);
        const float* p = reinterpret_cast<const float*>(
            gathered->buffer->data() + gathered->offset);
        out.values.emplace_back(p, p + e.config().units[0].numel());
        if (absl::Status s = e.Release(0, /*reshard=*/i == 1); !s.ok()) {
          out.status = s;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<float> initial(18);
  Init(0, 0, initial.data(), 18);
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(seen[r].status.ok()) << "rank " << r << ": " << seen[r].status;
    EXPECT_EQ(seen[r].all_gathers, (std::vector<int64_t>{1, 1, 2}))
        << "rank " << r;
    for (const std::vector<float>& values : seen[r].values) {
      EXPECT_EQ(values, initial) << "rank " << r;
    }
  }
}

// Prefetch (a trainer's hint): the AllGather starts at once and the next
// Gather of the unit is served by it; hints beyond K units in use, of units
// still gathered or already in flight are dropped; a Step waits for a
// prefetch and its stale result is gathered again.
TEST(StepEngineTest, PrefetchServesTheNextGatherWithinK) {
  constexpr int kW = 2;
  comm::InMemoryStore store;
  struct Seen {
    absl::Status status;
    std::vector<StepEngine::PrefetchResult> started;  // In call order.
    std::vector<bool> prefetched;      // Gather.was_prefetched, in call order.
    std::vector<int64_t> all_gathers;  // AllGather calls after each Gather.
    std::vector<float> unit1;          // Unit 1 as gathered by a prefetch.
    bool changed_after_step = false;
  };
  std::vector<Seen> seen(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] {
      Seen& out = seen[r];
      auto fail = [&](absl::Status s) {
        if (out.status.ok()) out.status = s;
      };
      auto groups = ConnectFullShard(r, kW, store);
      if (!groups.ok()) return fail(groups.status());
      std::shared_ptr<comm::Collective> group = groups->shard;
      memory::HeapAllocator heap;
      auto engine = StepEngine::Create(Config(kW, kW, r, 2), Init, heap);
      if (!engine.ok()) return fail(engine.status());
      StepEngine& e = **engine;
      e.SetCommunicators(group, groups->replica);
      const absl::Duration t = absl::Seconds(30);
      auto gather = [&](int unit) -> const float* {
        auto g = e.Gather(unit, t);
        if (!g.ok()) {
          fail(g.status());
          return nullptr;
        }
        out.prefetched.push_back(g->was_prefetched);
        out.all_gathers.push_back(
            group->Stats().of(comm::OpKind::kAllGather).calls);
        return reinterpret_cast<const float*>(g->buffer->data() + g->offset);
      };
      if (gather(0) == nullptr) return;            // AG 1.
      out.started.push_back(e.Prefetch(1, t, 2));  // AG 2: started.
      out.started.push_back(e.Prefetch(1, t, 2));  // In flight.
      const float* p1 = gather(1);                 // Served.
      if (p1 == nullptr) return;
      out.unit1.assign(p1, p1 + e.config().units[1].numel());
      if (!e.Release(0).ok() || !e.Release(1, /*reshard=*/true).ok()) {
        return fail(absl::InternalError("release"));
      }
      out.started.push_back(e.Prefetch(0, t, 2));  // Still gathered.
      if (gather(0) == nullptr) return;            // Cached: no AG.
      out.started.push_back(e.Prefetch(1, t, 1));  // K = 1 in use: dropped.
      out.started.push_back(e.Prefetch(1, t, 2));  // AG 3: started.
      // Reduce a gradient for every unit, then Step with the prefetch of
      // unit 1 (parameters of step 0) still unconsumed.
      if (!e.Release(0).ok()) return fail(absl::InternalError("release"));
      for (int u = 0; u < 2; ++u) {
        auto slot = e.GradientSlot(u);
        if (!slot.ok()) return fail(slot.status());
        float* g =
            reinterpret_cast<float*>(slot->buffer->data() + slot->offset);
        for (int64_t i = 0; i < e.config().units[u].padded_numel(); ++i) {
          g[i] = i < e.config().units[u].numel() ? GradValue(r, 1, u, i) : 0;
        }
        if (absl::Status s = e.ReduceGrad(u, t); !s.ok()) return fail(s);
      }
      auto stepped = e.Step(1, t);
      if (!stepped.ok()) return fail(stepped.status());
      const float* after = gather(1);  // Stale prefetch dropped: AG 4.
      if (after == nullptr) return;
      out.changed_after_step =
          !std::equal(out.unit1.begin(), out.unit1.end(), after);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<float> initial(5);
  Init(1, 0, initial.data(), 5);
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(seen[r].status.ok()) << "rank " << r << ": " << seen[r].status;
    using R = StepEngine::PrefetchResult;
    EXPECT_EQ(seen[r].started,
              (std::vector<R>{R::kStarted, R::kNotNeeded, R::kNotNeeded,
                              R::kDropped, R::kStarted}))
        << "rank " << r;
    EXPECT_EQ(seen[r].prefetched,
              (std::vector<bool>{false, true, false, false}))
        << "rank " << r;
    // The step's own collectives gather the norm partials (1 AllGather).
    EXPECT_EQ(seen[r].all_gathers, (std::vector<int64_t>{1, 2, 2, 5}))
        << "rank " << r;
    EXPECT_EQ(seen[r].unit1, initial) << "rank " << r;
    EXPECT_TRUE(seen[r].changed_after_step) << "rank " << r;
  }
}

TEST(StepEngineTest, CollectiveWaitIsTheTimeBlockedOnALatePeer) {
  constexpr int kW = 2;
  // Rank 1 issues its AllGather this long after rank 0 has started its
  // own, which cannot complete before: rank 0 waits about this long.
  constexpr absl::Duration kLate = absl::Milliseconds(300);
  comm::InMemoryStore store;
  absl::Notification rank0_gathers;
  struct Seen {
    absl::Status status;
    absl::Duration waited;     // collective_wait() across the Gather.
    absl::Duration call_time;  // The Gather call, end to end.
  };
  std::vector<Seen> seen(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([&, r] {
      Seen& out = seen[r];
      auto groups = ConnectFullShard(r, kW, store);
      if (!groups.ok()) {
        out.status = groups.status();
        if (r == 0) rank0_gathers.Notify();
        return;
      }
      memory::HeapAllocator heap;
      auto engine = StepEngine::Create(Config(kW, kW, r, 1), Init, heap);
      if (!engine.ok()) {
        out.status = engine.status();
        if (r == 0) rank0_gathers.Notify();
        return;
      }
      StepEngine& e = **engine;
      e.SetCommunicators(groups->shard, groups->replica);
      if (r == 0) {
        rank0_gathers.Notify();
      } else {
        rank0_gathers.WaitForNotification();
        absl::SleepFor(kLate);
      }
      const absl::Duration before = e.collective_wait();
      const MonoTime started = MonoNow();
      out.status = e.Gather(0, absl::Seconds(30)).status();
      out.call_time = MonoNow() - started;
      out.waited = e.collective_wait() - before;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(seen[r].status.ok()) << "rank " << r << ": " << seen[r].status;
    EXPECT_LE(seen[r].waited, seen[r].call_time) << "rank " << r;
  }
  // Rank 0's wait ends after rank 1 issued, at least kLate after rank 0
  // announced its Gather; the part of the call before its Wait is
  // microseconds, so half of kLate leaves room for a slow machine.
  EXPECT_GE(seen[0].waited, kLate / 2);
  EXPECT_LT(seen[1].waited, seen[0].waited);
}

class StepEngineSingleRankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = StepEngine::Create(Config(1, 1, 0, 1), Init, heap_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
  }
  memory::HeapAllocator heap_;
  std::unique_ptr<StepEngine> engine_;
};

TEST_F(StepEngineSingleRankTest, WithoutCollectivesNothingIsWaitedFor) {
  ASSERT_TRUE(engine_->Gather(0, absl::Seconds(1)).ok());
  ASSERT_TRUE(engine_->Release(0).ok());
  ASSERT_TRUE(engine_->GradientSlot(0).ok());
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
  for (int u = 1; u < static_cast<int>(engine_->config().units.size()); ++u) {
    ASSERT_TRUE(engine_->GradientSlot(u).ok());
    ASSERT_TRUE(engine_->ReduceGrad(u, absl::Seconds(1)).ok());
  }
  ASSERT_TRUE(engine_->Step(1, absl::Seconds(1)).ok());
  EXPECT_EQ(engine_->collective_wait(), absl::ZeroDuration());
}

TEST_F(StepEngineSingleRankTest, RejectsUnknownUnits) {
  EXPECT_EQ(engine_->Gather(2, absl::Seconds(1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Release(-1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->ReduceGrad(7, absl::Seconds(1)).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(StepEngineSingleRankTest, DoubleReleaseIsAFailedPrecondition) {
  ASSERT_TRUE(engine_->Gather(0, absl::Seconds(1)).ok());
  ASSERT_TRUE(engine_->Release(0).ok());
  EXPECT_EQ(engine_->Release(0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(StepEngineSingleRankTest, StepWithoutGradientsChangesNothing) {
  const auto before = *engine_->MasterShard(0);
  auto step = engine_->Step(1, absl::Seconds(1));
  ASSERT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(step.status().message().find("without gradients"),
            std::string::npos);
  EXPECT_EQ(engine_->committed_step(), 0);
  EXPECT_EQ(*engine_->MasterShard(0), before);
}

TEST_F(StepEngineSingleRankTest, StepMustBeTheNextOne) {
  for (int u = 0; u < 2; ++u) {
    ASSERT_TRUE(engine_->ReduceGrad(u, absl::Seconds(1)).ok());
  }
  EXPECT_EQ(engine_->Step(2, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto ok = engine_->Step(1, absl::Seconds(1));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->step, 1);
  EXPECT_EQ(engine_->committed_step(), 1);
}

TEST_F(StepEngineSingleRankTest, UnitIsReducedOncePerStep) {
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
  EXPECT_EQ(engine_->ReduceGrad(0, absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Writes `value * (i + 1)` into unit u's gradient slot.
void WriteGrad(StepEngine& e, int u, float value) {
  auto slot = e.GradientSlot(u);
  ASSERT_TRUE(slot.ok());
  float* g = reinterpret_cast<float*>(slot->buffer->data() + slot->offset);
  for (int64_t i = 0; i < e.config().units[u].numel(); ++i) {
    g[i] = value * static_cast<float>(i + 1);
  }
}

TEST_F(StepEngineSingleRankTest,
       AccumulatedMicroBatchesEqualOneSummedGradient) {
  // Three micro-batches of 0.25, 0.5 and 0.125 (exact sums) against one
  // gradient of 0.875.
  memory::HeapAllocator heap;
  auto summed = StepEngine::Create(Config(1, 1, 0, 1), Init, heap);
  ASSERT_TRUE(summed.ok());
  for (int u = 0; u < 2; ++u) {
    WriteGrad(*engine_, u, 0.25f);
    ASSERT_TRUE(engine_->ReduceGrad(u, absl::Seconds(1), true).ok());
    WriteGrad(*engine_, u, 0.5f);
    ASSERT_TRUE(engine_->ReduceGrad(u, absl::Seconds(1), true).ok());
    EXPECT_GT(engine_->held_bytes(), engine_->planned_memory().total_bytes);
    WriteGrad(*engine_, u, 0.125f);
    ASSERT_TRUE(engine_->ReduceGrad(u, absl::Seconds(1)).ok());
    WriteGrad(**summed, u, 0.875f);
    ASSERT_TRUE((*summed)->ReduceGrad(u, absl::Seconds(1)).ok());
  }
  // The accumulation buffers are gone once reduced.
  EXPECT_EQ(engine_->held_bytes(), engine_->planned_memory().total_bytes);
  ASSERT_TRUE(engine_->Step(1, absl::Seconds(1)).ok());
  ASSERT_TRUE((*summed)->Step(1, absl::Seconds(1)).ok());
  for (int u = 0; u < 2; ++u) {
    EXPECT_EQ(*engine_->MasterShard(u), *(*summed)->MasterShard(u));
  }
}

TEST_F(StepEngineSingleRankTest, RefusedAccumulationBufferAllocatesNothing) {
  std::vector<std::pair<std::string, int64_t>> asked;
  int64_t held_when_asked = -1;
  engine_->SetGrowthAdmission(
      [&](absl::string_view what, int64_t bytes, int64_t held) {
        asked.emplace_back(std::string(what), bytes);
        held_when_asked = held;
        return absl::ResourceExhaustedError("no room");
      });
  const int64_t held = engine_->held_bytes();
  WriteGrad(*engine_, 0, 0.25f);
  const absl::Status s = engine_->ReduceGrad(0, absl::Seconds(1), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "no room");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].first, "layer0.accumulation");
  EXPECT_EQ(asked[0].second, 18 * 4);  // The unit's real elements, fp32.
  EXPECT_EQ(held_when_asked, held);
  EXPECT_EQ(engine_->held_bytes(), held);
  // Nothing was accumulated: the unit can still be reduced this step, and
  // an admitted buffer is asked for once per accumulation.
  engine_->SetGrowthAdmission(
      [&](absl::string_view what, int64_t bytes, int64_t) {
        asked.emplace_back(std::string(what), bytes);
        return absl::OkStatus();
      });
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1), true).ok());
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1), true).ok());
  EXPECT_EQ(asked.size(), 2u);
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
  EXPECT_EQ(engine_->held_bytes(), held);
}

TEST_F(StepEngineSingleRankTest, NewCommunicatorsAbandonTheStepInProgress) {
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
  ASSERT_TRUE(engine_->ReduceGrad(1, absl::Seconds(1), true).ok());
  engine_->SetCommunicators(nullptr, nullptr);  // The next epoch's (W = 1).
  // The redo reduces unit 0 again; unit 1's accumulation is gone.
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
  EXPECT_EQ(engine_->held_bytes(), engine_->planned_memory().total_bytes);
  EXPECT_EQ(engine_->Step(1, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine_->ReduceGrad(1, absl::Seconds(1)).ok());
  EXPECT_TRUE(engine_->Step(1, absl::Seconds(1)).ok());
}

// An export that outlived its epoch (its peers' gathers failed, its own
// rank was busy writing) must not run its next gather on the next epoch's
// communicators: the peers there are not in it, and the mismatched
// collective broke the new epoch (export_outcome_test).
TEST_F(StepEngineSingleRankTest, AnExportsGatherNeverRunsOnLaterCommunicators) {
  const uint64_t generation = engine_->communicator_generation();
  std::vector<float> out;
  ASSERT_TRUE(engine_
                  ->GatherStateInto(0, StepEngine::StateKind::kParameters,
                                    absl::Seconds(1), out, generation)
                  .ok());
  engine_->SetCommunicators(nullptr, nullptr);  // The next epoch's.
  EXPECT_NE(engine_->communicator_generation(), generation);
  EXPECT_EQ(engine_
                ->GatherStateInto(0, StepEngine::StateKind::kParameters,
                                  absl::Seconds(1), out, generation)
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_TRUE(engine_
                  ->GatherStateInto(0, StepEngine::StateKind::kParameters,
                                    absl::Seconds(1), out,
                                    engine_->communicator_generation())
                  .ok());
}

TEST_F(StepEngineSingleRankTest, HoldsExactlyThePlannedBytes) {
  EXPECT_EQ(engine_->held_bytes(), engine_->planned_memory().total_bytes);
}

void ExpectHeldEqualsPlanned(const StepEngine& e) {
  const core::MemoryBreakdown p = e.planned_memory();
  const core::MemoryBreakdown h = e.held_memory();
  EXPECT_EQ(h.parameter_shard_bytes, p.parameter_shard_bytes);
  EXPECT_EQ(h.lowp_parameter_shard_bytes, p.lowp_parameter_shard_bytes);
  EXPECT_EQ(h.gradient_shard_bytes, p.gradient_shard_bytes);
  EXPECT_EQ(h.optimizer_state_bytes, p.optimizer_state_bytes);
  EXPECT_EQ(h.gathered_parameter_bytes, p.gathered_parameter_bytes);
  EXPECT_EQ(h.unsharded_gradient_bytes, p.unsharded_gradient_bytes);
  EXPECT_EQ(h.shard_padding_bytes, p.shard_padding_bytes);
  EXPECT_EQ(h.peak_parameter_bytes, p.peak_parameter_bytes);
  EXPECT_EQ(h.total_bytes, p.total_bytes);
}

TEST_F(StepEngineSingleRankTest, HoldsThePlannedBytesPerCategory) {
  ExpectHeldEqualsPlanned(*engine_);
  // An accumulation buffer counts as unsharded gradient, then goes.
  WriteGrad(*engine_, 0, 0.25f);
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1), true).ok());
  EXPECT_GT(engine_->held_memory().unsharded_gradient_bytes,
            engine_->planned_memory().unsharded_gradient_bytes);
  ASSERT_TRUE(engine_->ReduceGrad(0, absl::Seconds(1)).ok());
  ExpectHeldEqualsPlanned(*engine_);
}

TEST(StepEngineMemoryTest, HoldsThePlannedBytesPerCategoryWhenSharded) {
  // Both ranks of W = F = 2: gathered slots and padded shards (no
  // communicator is needed to allocate).
  memory::HeapAllocator heap;
  for (int rank = 0; rank < 2; ++rank) {
    auto engine = StepEngine::Create(Config(2, 2, rank, 1), Init, heap);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ExpectHeldEqualsPlanned(**engine);
    EXPECT_GT((*engine)->held_memory().gathered_parameter_bytes, 0);
  }
}

TEST(StepEngineCreateTest, RejectsARankOutsideThePlan) {
  memory::HeapAllocator heap;
  EXPECT_EQ(StepEngine::Create(Config(2, 2, 2, 1), Init, heap).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Reduces every unit of `e` with gradient `value * (i + 1)`.
void ReduceAll(StepEngine& e, float value) {
  for (int u = 0; u < static_cast<int>(e.config().units.size()); ++u) {
    WriteGrad(e, u, value);
    ASSERT_TRUE(e.ReduceGrad(u, absl::Seconds(1)).ok());
  }
}

TEST_F(StepEngineSingleRankTest, ARejectedVoteLeavesTheStepUnapplied) {
  const auto before = *engine_->MasterShard(0);
  ReduceAll(*engine_, 0.5f);
  int64_t voted_on = 0;
  auto step = engine_->Step(1, absl::Seconds(1), [&](const StepResult& r) {
    voted_on = r.step;
    return absl::AbortedError("vote: no");
  });
  EXPECT_EQ(step.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(voted_on, 1);
  EXPECT_EQ(engine_->committed_step(), 0);
  EXPECT_EQ(*engine_->MasterShard(0), before);
}

TEST_F(StepEngineSingleRankTest, PerStepLearningRateZeroChangesNothing) {
  const auto before = *engine_->MasterShard(0);
  ReduceAll(*engine_, 0.5f);
  auto step = engine_->Step(1, absl::Seconds(1), nullptr, 0.0);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(engine_->learning_rate(), 0.0);
  EXPECT_EQ(*engine_->MasterShard(0), before);
  // The next step with the configured rate moves the parameters.
  ReduceAll(*engine_, 0.5f);
  ASSERT_TRUE(engine_->Step(2, absl::Seconds(1), nullptr, 1e-2).ok());
  EXPECT_NE(*engine_->MasterShard(0), before);
}

TEST_F(StepEngineSingleRankTest, InstalledStateContinuesLikeTheOriginal) {
  // Two steps on the original; a second engine gets its state bytes (as a
  // replica transfer or a checkpoint would) and both take step 3 alike.
  for (int64_t s = 1; s <= 2; ++s) {
    ReduceAll(*engine_, 0.25f * s);
    ASSERT_TRUE(engine_->Step(s, absl::Seconds(1)).ok());
  }
  memory::HeapAllocator heap;
  auto copy = StepEngine::Create(Config(1, 1, 0, 1), Init, heap);
  ASSERT_TRUE(copy.ok());
  const auto from = engine_->StateSections();
  const auto to = (*copy)->StateSections();
  ASSERT_EQ(from.size(), to.size());
  for (size_t i = 0; i < from.size(); ++i) {
    ASSERT_EQ(from[i].bytes, to[i].bytes);
    std::memcpy(to[i].data, from[i].data, from[i].bytes);
  }
  ASSERT_TRUE((*copy)->InstallState(2).ok());
  EXPECT_EQ((*copy)->committed_step(), 2);
  ReduceAll(*engine_, 0.75f);
  ReduceAll(**copy, 0.75f);
  ASSERT_TRUE(engine_->Step(3, absl::Seconds(1)).ok());
  ASSERT_TRUE((*copy)->Step(3, absl::Seconds(1)).ok());
  for (int u = 0; u < 2; ++u) {
    EXPECT_EQ(*engine_->MasterShard(u), *(*copy)->MasterShard(u));
  }
}

}  // namespace
}  // namespace shardd::node
