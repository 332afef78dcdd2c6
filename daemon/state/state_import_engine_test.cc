#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/model_config.h"
#include "daemon/core/shard_plan.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/step_engine.h"
#include "daemon/state/state_import.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// StateImport against real engines (host memory, no communicators: loading
// needs none): every rank of several W and F loads exactly its own slice.
namespace shardd::state {
namespace {

using ::testing::HasSubstr;
using Kind = node::StepEngine::StateKind;

// Unit "u0": "w" [5, 3] (F32 in the file), "b" [3] (BF16); unit "u1": "w"
// [7] (F16). Element k of a tensor of unit u: ((k * 5 + u) % 13 - 6) / 4,
// exact in every dtype.
float Value(int unit, int64_t k, int kind = 0) {
  return static_cast<float>((k * 5 + unit + kind * 3) % 13 - 6) / 4.0f;
}

core::ModelConfig Model() {
  core::ModelConfig m;
  m.units = {{"u0",
              {{{"w", {5, 3}, core::DType::kFloat32}, {}},
               {{"b", {3}, core::DType::kFloat32}, {}}},
              {}},
             {"u1", {{{"w", {7}, core::DType::kFloat32}, {}}}, {}}};
  m.config.strategy = core::ShardingStrategy::kHybridShard;
  return m;
}

class StateImportEngineTest : public ::testing::Test {
 protected:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };

  // A safetensors file as ExportState's FULL layout writes it; with
  // `optimizer`, AdamW moments and optimizer_step 4.
  std::string WriteFull(const std::string& name, bool optimizer) {
    std::vector<Entry> entries;
    const core::ModelConfig m = Model();
    const char* dtypes[2][2] = {{"F32", "BF16"}, {"F16", ""}};
    const int kinds = optimizer ? 3 : 1;
    for (int kind = 0; kind < kinds; ++kind) {
      for (size_t u = 0; u < m.units.size(); ++u) {
        for (size_t t = 0; t < m.units[u].tensors.size(); ++t) {
          const auto& spec = m.units[u].tensors[t].spec;
          int64_t n = 1;
          for (int64_t d : spec.shape) n *= d;
          Entry e{absl::StrCat(m.units[u].name, ".", spec.name,
                               kind == 1   ? ".exp_avg"
                               : kind == 2 ? ".exp_avg_sq"
                                           : ""),
                  kind == 0 ? dtypes[u][t] : "F32",
                  spec.shape,
                  {}};
          for (int64_t k = 0; k < n; ++k) {
            e.values.push_back(Value(u, k, kind));
          }
          entries.push_back(std::move(e));
        }
      }
    }
    std::string meta = "\"__metadata__\":{\"format\":\"shardd\"";
    if (optimizer) {
      absl::StrAppend(&meta,
                      ",\"optimizer\":\"adamw\",\"optimizer_step\":\"4\"");
    }
    meta += "}";
    std::vector<std::string> fields = {meta};
    std::string data;
    for (const Entry& e : entries) {
      std::string raw;
      for (float v : e.values) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (e.dtype == "F32") {
          raw.append(reinterpret_cast<const char*>(&v), 4);
        } else if (e.dtype == "BF16") {
          const uint16_t h = bits >> 16;
          raw.append(reinterpret_cast<const char*>(&h), 2);
        } else {
          const uint16_t h = core::FloatToHalf(v);
          raw.append(reinterpret_cast<const char*>(&h), 2);
        }
      }
      fields.push_back(absl::StrCat(
          "\"", e.name, "\":{\"dtype\":\"", e.dtype, "\",\"shape\":[",
          absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", data.size(), ",",
          data.size() + raw.size(), "]}"));
      data += raw;
    }
    const std::string header = "{" + absl::StrJoin(fields, ",") + "}";
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) {
      prefix[i] = static_cast<char>(header.size() >> (8 * i));
    }
    const std::string path =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
    std::ofstream(path, std::ios::binary) << prefix << header << data;
    return path;
  }

  std::unique_ptr<node::StepEngine> Engine(const core::ModelConfig& m, int w,
                                           int f, int rank) {
    node::OptimizerSpec optimizer;
    optimizer.kind = core::OptimizerKind::kAdamW;
    node::EngineConfig config{.rank = rank,
                              .plan = *core::ShardPlan::Create(
                                  w, core::ShardingStrategy::kHybridShard, f),
                              .units = *core::BuildLayouts(m, f),
                              .reduce_dtype = core::DType::kFloat32,
                              .optimizer = optimizer,
                              .max_grad_norm = 0,
                              .max_gathered_units = 1,
                              .exclude_from_weight_decay = {}};
    auto engine = node::StepEngine::Create(
        std::move(config),
        [](int, int64_t, float* out, int64_t n) {
          std::fill(out, out + n, 9.0f);  // The init values.
        },
        heap_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return *std::move(engine);
  }

  // The section of `kind` and `unit`, as floats (host memory).
  static std::vector<float> Section(node::StepEngine& e, int unit, Kind kind) {
    for (const auto& s : e.StateSections()) {
      if (s.unit == unit && s.kind == kind) {
        const float* p = reinterpret_cast<const float*>(s.data);
        return std::vector<float>(p, p + s.numel);
      }
    }
    return {};
  }

  // Element i of unit u's flat buffer, as the file holds it.
  static float Flat(int unit, int64_t i, int kind) {
    if (unit == 0 && i >= 15) return Value(0, i - 15, kind);  // "b".
    return Value(unit, i, kind);
  }

  memory::HeapAllocator heap_;
};

TEST_F(StateImportEngineTest, EveryRankLoadsItsSliceOfAFullExportAtAnyF) {
  const std::string path = WriteFull("full.safetensors", /*optimizer=*/true);
  ImportSources sources;
  sources.load_from = path;
  const core::ModelConfig m = Model();
  for (const auto& [w, f] : {std::pair{1, 1}, {2, 2}, {4, 2}, {3, 3}, {8, 4}}) {
    auto plan = StateImport::Plan(sources, m, f);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (int rank = 0; rank < w; ++rank) {
      auto engine = Engine(m, w, f, rank);
      auto step = plan->Apply(*engine);
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_EQ(*step, 4);
      EXPECT_EQ(engine->committed_step(), 4);
      for (int u = 0; u < 2; ++u) {
        const core::ShardRange& r = engine->config().units[u].shard(rank % f);
        int kind = 0;
        for (Kind k : {Kind::kParameters, Kind::kExpAvg, Kind::kExpAvgSq}) {
          const std::vector<float> got = Section(*engine, u, k);
          ASSERT_EQ(static_cast<int64_t>(got.size()), r.stored());
          for (int64_t i = 0; i < r.numel; ++i) {
            EXPECT_EQ(got[i], Flat(u, r.offset + i, kind))
                << "W " << w << " F " << f << " rank " << rank << " unit " << u
                << " kind " << kind << " element " << i;
          }
          for (int64_t i = r.numel; i < r.stored(); ++i) EXPECT_EQ(got[i], 0);
          ++kind;
        }
      }
    }
  }
}

TEST_F(StateImportEngineTest, ParametersOnlyFileKeepsStepZeroAndZeroMoments) {
  ImportSources sources;
  sources.load_from = WriteFull("params.safetensors", /*optimizer=*/false);
  const core::ModelConfig m = Model();
  auto plan = StateImport::Plan(sources, m, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto engine = Engine(m, 2, 2, 1);
  auto step = plan->Apply(*engine);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 0);
  const core::ShardRange& r = engine->config().units[0].shard(1);
  EXPECT_EQ(Section(*engine, 0, Kind::kParameters)[0], Flat(0, r.offset, 0));
  EXPECT_EQ(Section(*engine, 0, Kind::kExpAvg)[0], 0.0f);
}

TEST_F(StateImportEngineTest, TensorFileOverwritesOnlyThatTensor) {
  ImportSources sources;
  sources.tensor_files.push_back(ImportSources::TensorFile{
      0, 1, WriteFull("tensor.safetensors", false), "u0.b"});
  const core::ModelConfig m = Model();
  auto plan = StateImport::Plan(sources, m, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto engine = Engine(m, 1, 1, 0);
  ASSERT_TRUE(plan->Apply(*engine).ok());
  const std::vector<float> got = Section(*engine, 0, Kind::kParameters);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(got[i], 9.0f) << "init kept";
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(got[15 + i], Value(0, i));
}

TEST_F(StateImportEngineTest, PlanRejectsMissingTensorWrongShapeAndOptimizer) {
  const std::string path = WriteFull("bad.safetensors", /*optimizer=*/true);
  core::ModelConfig m = Model();
  m.units[1].tensors.push_back({{"extra", {2}, core::DType::kFloat32}, {}});
  ImportSources sources;
  sources.load_from = path;
  auto missing = StateImport::Plan(sources, m, 1);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr(path + ": no tensor 'u1.extra'"));

  m = Model();
  m.units[0].tensors[0].spec.shape = {3, 5};
  auto shape = StateImport::Plan(sources, m, 1);
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr("'u0.w' has shape [5,3]"));

  m = Model();
  m.config.optimizer = core::SgdOptions{};
  auto sgd = StateImport::Plan(sources, m, 1);
  EXPECT_EQ(sgd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sgd.status().message(), HasSubstr("holds adamw state"));
}

}  // namespace
}  // namespace shardd::state
