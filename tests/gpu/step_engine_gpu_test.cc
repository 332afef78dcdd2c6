// Needs a GPU: tagged "gpu" and built only with --config=cuda. Run with
//   bazel test --config=cuda --test_tag_filters=gpu //tests/gpu/...
//
// The step engine at W = 1, F = 1 on the daemon's two backends, the GPU's
// (CudaEngineBackend: device memory, CudaEngineMath, NCCL size-1
// communicators) and the CPU's (CpuEngineBackend: shared memory,
// HostEngineMath, Gloo), given the same gradients: for every dtype (the
// units' and the reduce dtype), both optimizers, with and without gradient
// accumulation over micro-batches (ReduceGrad accumulate_only) and with
// clipping, every step's norm and clip scale, the gathered units (the
// low-precision copies), the master shards and the optimizer state must be
// equal bit for bit. What example_trainer cannot show on one GPU (it trains
// fp32 parameters without accumulation) through the engine the daemon runs.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/core/dtype.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"
#include "daemon/node/cpu_engine_backend.h"
#include "daemon/node/cuda/cuda_engine_backend.h"
#include "daemon/node/engine_backend.h"
#include "daemon/node/group_spec.h"
#include "daemon/node/step_engine.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

using core::DType;
using core::OptimizerKind;

constexpr int kSteps = 3;
const absl::Duration kTimeout = absl::Seconds(30);

struct TrainingRun {
  DType dtype = DType::kFloat32;
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  int micro_batches = 1;
};

// What a training run leaves behind, to be compared between backends.
struct Outcome {
  absl::Status status;
  std::vector<StepResult> steps;
  std::vector<std::vector<uint8_t>> gathered;  // Per unit, in its dtype.
  std::vector<std::vector<float>> master;      // Per unit.
  std::vector<std::vector<float>> state;       // Per unit and state kind.
};

EngineConfig Config(const TrainingRun& run) {
  // Odd sizes: the kernels' grid-stride loops and tails.
  const std::vector<core::UnitSpec> model = {
      {"layer0",
       {{"weight", {257, 129}, run.dtype}, {"bias", {257}, run.dtype}}},
      {"layer1", {{"weight", {1001}, run.dtype}}}};
  std::vector<core::UnitLayout> units;
  for (const core::UnitSpec& spec : model) {
    units.push_back(*core::UnitLayout::Create(spec, 1));
  }
  OptimizerSpec optimizer;
  optimizer.kind = run.optimizer;
  optimizer.adamw.lr = 1e-2;
  optimizer.adamw.weight_decay = 0.1;
  optimizer.sgd.lr = 1e-2;
  optimizer.sgd.momentum = 0.9;
  optimizer.sgd.weight_decay = 1e-4;
  optimizer.sgd.nesterov = true;
  return EngineConfig{.rank = 0,
                      .plan = *core::ShardPlan::Create(
                          1, core::ShardingStrategy::kFullShard, 1),
                      .units = std::move(units),
                      .reduce_dtype = run.dtype,
                      .optimizer = optimizer,
                      // Normal gradients over ~35,000 elements: a norm far
                      // above 1, so every step clips.
                      .max_grad_norm = 1.0,
                      .max_gathered_units = 2,
                      .exclude_from_weight_decay = {{false, true}, {false}}};
}

void Init(int unit, int64_t offset, float* out, int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(unit * 1000003 + offset));
  std::normal_distribution<float> normal(0.0f, 0.1f);
  // Each element's value from its index alone (any sub-range gives the
  // same values as the whole).
  for (int64_t i = 0; i < n; ++i) {
    rng.seed(static_cast<uint32_t>(unit * 1000003 + offset + i));
    out[i] = normal(rng);
  }
}

// One micro-batch's gradient of a unit, in `dtype`'s bytes.
std::vector<uint8_t> Gradient(DType dtype, int step, int unit, int micro,
                              int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(step * 7919 + unit * 104729 + micro));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> out(n * core::DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float g = normal(rng);
    if (dtype == DType::kFloat32) {
      std::memcpy(out.data() + i * 4, &g, 4);
    } else {
      const uint16_t h = dtype == DType::kBFloat16 ? core::FloatToBFloat16(g)
                                                   : core::FloatToHalf(g);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

Outcome Train(EngineBackend& backend, const TrainingRun& run) {
  Outcome out;
  auto fail = [&](absl::Status s, absl::string_view what) {
    out.status = absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    return out;
  };
  comm::InMemoryStore store;
  GroupSpec shard_spec{.rank = 0, .size = 1, .epoch = 1, .group = "shard/0"};
  GroupSpec replica_spec{
      .rank = 0, .size = 1, .epoch = 1, .group = "replica/0"};
  auto shard = backend.MakeCollective(shard_spec, store);
  if (!shard.ok()) return fail(shard.status(), "shard group");
  auto replica = backend.MakeCollective(replica_spec, store);
  if (!replica.ok()) return fail(replica.status(), "replica group");
  auto engine = StepEngine::Create(Config(run), Init, backend.shared(),
                                   backend.private_memory(), backend.math());
  if (!engine.ok()) return fail(engine.status(), "StepEngine::Create");
  StepEngine& e = **engine;
  e.SetCommunicators(std::move(*shard), std::move(*replica));
  const int units = static_cast<int>(e.config().units.size());
  for (int step = 1; step <= kSteps; ++step) {
    for (int u = 0; u < units; ++u) {
      auto gathered = e.Gather(u, kTimeout);
      if (!gathered.ok()) return fail(gathered.status(), "Gather");
      if (absl::Status s = e.Release(u); !s.ok()) return fail(s, "Release");
      auto slot = e.GradientSlot(u);
      if (!slot.ok()) return fail(slot.status(), "GradientSlot");
      const int64_t n = e.config().units[u].numel();
      for (int m = 0; m < run.micro_batches; ++m) {
        const std::vector<uint8_t> g = Gradient(run.dtype, step, u, m, n);
        // The trainer's write: a GPU trainer's kernel, here an upload.
        if (absl::Status s = e.math().Upload(
                slot->buffer->data() + slot->offset, g.data(), g.size());
            !s.ok()) {
          return fail(s, "Upload");
        }
        if (absl::Status s = e.ReduceGrad(
                u, kTimeout, /*accumulate_only=*/m + 1 < run.micro_batches);
            !s.ok()) {
          return fail(s, "ReduceGrad");
        }
      }
    }
    auto result = e.Step(step, kTimeout);
    if (!result.ok()) return fail(result.status(), "Step");
    out.steps.push_back(*result);
  }
  for (int u = 0; u < units; ++u) {
    auto gathered = e.Gather(u, kTimeout);
    if (!gathered.ok()) return fail(gathered.status(), "final Gather");
    std::vector<uint8_t> bytes(static_cast<size_t>(gathered->bytes));
    if (absl::Status s = e.math().Download(
            bytes.data(), gathered->buffer->data() + gathered->offset,
            gathered->bytes);
        !s.ok()) {
      return fail(s, "Download");
    }
    out.gathered.push_back(std::move(bytes));
    if (absl::Status s = e.Release(u); !s.ok()) return fail(s, "Release");
    auto master = e.MasterShard(u);
    if (!master.ok()) return fail(master.status(), "MasterShard");
    out.master.push_back(*std::move(master));
    for (StepEngine::StateKind kind : e.OptimizerStateKinds()) {
      auto state = e.GatherState(u, kind, kTimeout);
      if (!state.ok()) return fail(state.status(), "GatherState");
      out.state.push_back(*std::move(state));
    }
  }
  return out;
}

bool SameBits(const void* a, const void* b, size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         SameBits(a.data(), b.data(), a.size() * sizeof(T));
}

class StepEngineGpuTest
    : public ::testing::TestWithParam<std::tuple<DType, OptimizerKind, int>> {
 protected:
  void SetUp() override {
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess)
        << "this test needs a GPU";
    ASSERT_GT(devices, 0);
    auto gpu = CudaEngineBackend::Create(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    const char* tmp = std::getenv("TEST_TMPDIR");
    cpu_ = std::make_unique<CpuEngineBackend>(tmp != nullptr ? tmp : "/tmp",
                                              "step_engine_gpu_test");
  }

  TrainingRun ThisRun() const {
    return TrainingRun{.dtype = std::get<0>(GetParam()),
                       .optimizer = std::get<1>(GetParam()),
                       .micro_batches = std::get<2>(GetParam())};
  }

  std::shared_ptr<CudaEngineBackend> gpu_;
  std::unique_ptr<CpuEngineBackend> cpu_;
};

TEST_P(StepEngineGpuTest, CudaZeroEndsWhereTheCpuEndsBitForBit) {
  const TrainingRun run = ThisRun();
  const Outcome on_cpu = Train(*cpu_, run);
  ASSERT_TRUE(on_cpu.status.ok()) << "cpu: " << on_cpu.status;
  const Outcome on_gpu = Train(*gpu_, run);
  ASSERT_TRUE(on_gpu.status.ok()) << "cuda:0: " << on_gpu.status;
  ASSERT_EQ(on_gpu.steps.size(), on_cpu.steps.size());
  for (size_t s = 0; s < on_cpu.steps.size(); ++s) {
    EXPECT_TRUE(SameBits(&on_gpu.steps[s].grad_norm, &on_cpu.steps[s].grad_norm,
                         sizeof(double)))
        << "step " << s + 1 << " norm " << on_gpu.steps[s].grad_norm << " vs "
        << on_cpu.steps[s].grad_norm;
    EXPECT_TRUE(SameBits(&on_gpu.steps[s].clip_scale,
                         &on_cpu.steps[s].clip_scale, sizeof(float)))
        << "step " << s + 1;
    EXPECT_LT(on_cpu.steps[s].clip_scale, 1.0f) << "the run must clip";
  }
  ASSERT_EQ(on_gpu.gathered.size(), on_cpu.gathered.size());
  for (size_t u = 0; u < on_cpu.gathered.size(); ++u) {
    EXPECT_TRUE(SameBits(on_gpu.gathered[u], on_cpu.gathered[u]))
        << "gathered unit " << u;
    EXPECT_TRUE(SameBits(on_gpu.master[u], on_cpu.master[u]))
        << "master shard " << u;
  }
  ASSERT_EQ(on_gpu.state.size(), on_cpu.state.size());
  for (size_t i = 0; i < on_cpu.state.size(); ++i) {
    EXPECT_TRUE(SameBits(on_gpu.state[i], on_cpu.state[i]))
        << "optimizer state " << i;
  }
  // Training moved the parameters.
  std::vector<float> init(on_cpu.master[1].size());
  Init(1, 0, init.data(), static_cast<int64_t>(init.size()));
  EXPECT_FALSE(SameBits(on_cpu.master[1], init));
}

INSTANTIATE_TEST_SUITE_P(
    EveryDtypeOptimizerAndAccumulation, StepEngineGpuTest,
    ::testing::Combine(
        ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
        ::testing::Values(OptimizerKind::kAdamW, OptimizerKind::kSgdMomentum),
        ::testing::Values(1, 3)),
    [](const ::testing::TestParamInfo<StepEngineGpuTest::ParamType>& info) {
      return absl::StrCat(
          core::DTypeName(std::get<0>(info.param)), "_",
          std::get<1>(info.param) == OptimizerKind::kAdamW ? "adamw" : "sgd",
          "_", std::get<2>(info.param) == 1 ? "one_batch" : "micro_batches");
    });

}  // namespace
}  // namespace shardd::node
