#include "daemon/core/model_config.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

TensorConfig Tensor(std::string name, std::vector<int64_t> shape,
                    InitSpec init = InitSpec::Normal(1, 0.0f, 0.02f)) {
  TensorConfig tensor;
  tensor.spec.name = std::move(name);
  tensor.spec.shape = std::move(shape);
  tensor.init = std::move(init);
  return tensor;
}

// Three units of fp32 tensors, AdamW, FULL_SHARD.
ModelConfig ValidModel() {
  ModelConfig model;
  for (int u = 0; u < 3; ++u) {
    UnitConfig unit;
    unit.name = "layer" + std::to_string(u);
    unit.tensors.push_back(Tensor("weight", {64, 32}));
    unit.tensors.push_back(Tensor("bias", {64}, InitSpec::Zeros()));
    unit.tensors.back().exclude_from_weight_decay = true;
    model.units.push_back(std::move(unit));
  }
  return model;
}

void ExpectInvalid(const ModelConfig& model, absl::string_view field,
                   int64_t world_size = 4) {
  const absl::Status status = Validate(model, world_size);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(field), absl::string_view::npos)
      << "expected '" << field << "' in: " << status.message();
}

void ExpectDiffers(const ModelConfig& a, const ModelConfig& b,
                   absl::string_view message) {
  const absl::Status status = CompareModels(a, b);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(status.message(), message);
  EXPECT_NE(Fingerprint(a), Fingerprint(b));
}

class ModelConfigTest : public ::testing::Test {};

TEST_F(ModelConfigTest, ValidModelPasses) {
  EXPECT_TRUE(Validate(ValidModel(), 4).ok());
  ModelConfig sgd = ValidModel();
  sgd.config.optimizer = SgdOptions{.lr = 0.1, .momentum = 0.9};
  sgd.config.strategy = ShardingStrategy::kHybridShard;
  sgd.config.sharding_factor = 2;
  sgd.config.param_dtype = DType::kBFloat16;
  EXPECT_TRUE(Validate(sgd, 4).ok()) << Validate(sgd, 4);
}

TEST_F(ModelConfigTest, EmptyModelIsRejected) {
  ExpectInvalid(ModelConfig{}, "units: at least one unit");
}

TEST_F(ModelConfigTest, DuplicateUnitNameIsRejected) {
  ModelConfig model = ValidModel();
  model.units[2].name = "layer0";
  ExpectInvalid(model, "units[2].name: 'layer0' duplicates units[0].name");
}

TEST_F(ModelConfigTest, DuplicateTensorNameIsRejected) {
  ModelConfig model = ValidModel();
  model.units[1].tensors[1].spec.name = "weight";
  ExpectInvalid(model, "units[1].tensors[1].name");
}

TEST_F(ModelConfigTest, EmptyNamesAndUnitsAreRejected) {
  ModelConfig model = ValidModel();
  model.units[0].name.clear();
  ExpectInvalid(model, "units[0].name: must not be empty");
  model = ValidModel();
  model.units[1].tensors.clear();
  ExpectInvalid(model, "units[1].tensors: at least one tensor");
  model = ValidModel();
  model.units[1].tensors[0].spec.name.clear();
  ExpectInvalid(model, "units[1].tensors[0].name");
}

TEST_F(ModelConfigTest, BadDimIsRejectedNamingIt) {
  ModelConfig model = ValidModel();
  model.units[1].tensors[0].spec.shape = {64, 0};
  ExpectInvalid(model, "units[1].tensors[0].shape[1]: must be >= 1, got 0");
}

TEST_F(ModelConfigTest, MixedDtypesInAUnitAreRejected) {
  ModelConfig model = ValidModel();
  model.units[0].tensors[1].spec.dtype = DType::kBFloat16;
  ExpectInvalid(model, "units[0].tensors[1].dtype");
}

TEST_F(ModelConfigTest, UploadedValuesOfTheWrongCountAreRejected) {
  ModelConfig model = ValidModel();
  model.units[2].tensors[1].init =
      InitSpec::Values(std::string(63 * 4, '\0'), DType::kFloat32);
  ExpectInvalid(model, "units[2].tensors[1].init.values.data: 252 bytes");
  model.units[2].tensors[1].init =
      InitSpec::Values(std::string(64 * 4, '\0'), DType::kFloat32);
  EXPECT_TRUE(Validate(model, 4).ok());
}

TEST_F(ModelConfigTest, NegativeStdIsRejected) {
  ModelConfig model = ValidModel();
  model.units[0].tensors[0].init = InitSpec::Normal(1, 0.0f, -1.0f);
  ExpectInvalid(model, "units[0].tensors[0].init.normal.std");
}

TEST_F(ModelConfigTest, BadHyperParametersAreRejectedNamingTheField) {
  ModelConfig model = ValidModel();
  model.config.optimizer = AdamWOptions{.beta1 = 1.0};
  ExpectInvalid(model, "config.optimizer.adamw.beta1");
  model.config.optimizer = AdamWOptions{.eps = 0.0};
  ExpectInvalid(model, "config.optimizer.adamw.eps: must be > 0");
  model.config.optimizer = SgdOptions{.lr = -1.0};
  ExpectInvalid(model, "config.optimizer.sgd.lr");
  model.config.optimizer = SgdOptions{.dampening = 1.5};
  ExpectInvalid(model, "config.optimizer.sgd.dampening");
  model.config.optimizer = SgdOptions{.nesterov = true};
  ExpectInvalid(model, "config.optimizer.sgd.nesterov");
}

TEST_F(ModelConfigTest, BadShardingIsRejected) {
  ModelConfig model = ValidModel();
  model.config.strategy = ShardingStrategy::kHybridShard;
  model.config.sharding_factor = 3;
  ExpectInvalid(model, "config.sharding_factor");
  model.config.sharding_factor = 0;
  ExpectInvalid(model, "config.sharding_factor");
}

TEST_F(ModelConfigTest, BadScalarsAreRejected) {
  ModelConfig model = ValidModel();
  model.config.max_gathered_units = 0;
  ExpectInvalid(model, "config.max_gathered_units: must be >= 1");
  model = ValidModel();
  model.config.max_grad_norm = -1.0;
  ExpectInvalid(model, "config.max_grad_norm");
  model = ValidModel();
  model.units[1].alignment = {AlignmentMode::kBlock, 0};
  ExpectInvalid(model, "units[1].alignment.block_elements");
  EXPECT_EQ(Validate(ValidModel(), 0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelConfigTest, OverflowingSizeIsRejected) {
  ModelConfig model = ValidModel();
  model.units[0].tensors[0].spec.shape = {int64_t{1} << 40, int64_t{1} << 30};
  ExpectInvalid(model, "units[0].tensors[0].shape");
}

TEST_F(ModelConfigTest, IdenticalModelsCompareEqualWithEqualFingerprints) {
  EXPECT_TRUE(CompareModels(ValidModel(), ValidModel()).ok());
  EXPECT_EQ(Fingerprint(ValidModel()), Fingerprint(ValidModel()));
}

TEST_F(ModelConfigTest, FingerprintIsStable) {
  // Pinned: daemons of different builds must agree on the same model, so a
  // change to the hashed fields or the hash shows up here.
  EXPECT_EQ(Fingerprint(ValidModel()), uint64_t{223219440687809761});
}

TEST_F(ModelConfigTest, DifferingShapeIsNamedWithBothValues) {
  ModelConfig theirs = ValidModel();
  theirs.units[2].tensors[0].spec.shape = {64, 16};
  ExpectDiffers(ValidModel(), theirs,
                "units[2].tensors[0].shape: [64, 32] vs [64, 16]");
}

TEST_F(ModelConfigTest, DifferingLearningRateIsNamed) {
  ModelConfig mine = ValidModel();
  ModelConfig theirs = ValidModel();
  std::get<AdamWOptions>(theirs.config.optimizer).lr = 0.01;
  ExpectDiffers(mine, theirs, "config.optimizer.adamw.lr: 0.001 vs 0.01");
}

TEST_F(ModelConfigTest, DifferingShardingFactorIsNamed) {
  ModelConfig mine = ValidModel();
  ModelConfig theirs = ValidModel();
  mine.config.sharding_factor = 2;
  theirs.config.sharding_factor = 4;
  ExpectDiffers(mine, theirs, "config.sharding_factor: 2 vs 4");
}

TEST_F(ModelConfigTest, EachDifferingFieldIsNamed) {
  struct Case {
    std::function<void(ModelConfig&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig& m) { m.config.strategy = ShardingStrategy::kNoShard; },
       "config.strategy: FULL_SHARD vs NO_SHARD"},
      {[](ModelConfig& m) { m.config.param_dtype = DType::kBFloat16; },
       "config.param_dtype: unspecified vs bf16"},
      {[](ModelConfig& m) { m.config.reduce_dtype = DType::kFloat32; },
       "config.reduce_dtype: unspecified vs fp32"},
      {[](ModelConfig& m) { m.config.optimizer = SgdOptions{}; },
       "config.optimizer: adamw vs sgd"},
      {[](ModelConfig& m) {
         std::get<AdamWOptions>(m.config.optimizer).weight_decay = 0.0;
       },
       "config.optimizer.adamw.weight_decay: 0.01 vs 0"},
      {[](ModelConfig& m) { m.config.max_grad_norm = 1.0; },
       "config.max_grad_norm: 0 vs 1"},
      {[](ModelConfig& m) { m.config.max_gathered_units = 1; },
       "config.max_gathered_units: 2 vs 1"},
      {[](ModelConfig& m) { m.units.pop_back(); }, "units.size: 3 vs 2"},
      {[](ModelConfig& m) { m.units[1].name = "x"; },
       "units[1].name: 'layer1' vs 'x'"},
      {[](ModelConfig& m) {
         m.units[0].alignment = {AlignmentMode::kBlock, 8};
       },
       "units[0].alignment.mode: ELEMENT vs BLOCK"},
      {[](ModelConfig& m) { m.units[0].tensors.pop_back(); },
       "units[0].tensors.size: 2 vs 1"},
      {[](ModelConfig& m) { m.units[0].tensors[1].spec.name = "b"; },
       "units[0].tensors[1].name: 'bias' vs 'b'"},
      {[](ModelConfig& m) {
         m.units[0].tensors[1].spec.dtype = DType::kFloat16;
       },
       "units[0].tensors[1].dtype: fp32 vs fp16"},
      {[](ModelConfig& m) {
         m.units[0].tensors[1].exclude_from_weight_decay = false;
       },
       "units[0].tensors[1].exclude_from_weight_decay: 1 vs 0"},
      {[](ModelConfig& m) {
         m.units[1].tensors[0].init = InitSpec::Normal(2, 0.0f, 0.02f);
       },
       "units[1].tensors[0].init.normal.seed: 1 vs 2"},
      {[](ModelConfig& m) {
         m.units[1].tensors[0].init = InitSpec::Constant(1.0f);
       },
       "units[1].tensors[0].init: normal vs constant"},
  };
  for (const Case& c : cases) {
    ModelConfig theirs = ValidModel();
    c.change(theirs);
    ExpectDiffers(ValidModel(), theirs, c.message);
  }
}

TEST_F(ModelConfigTest, UploadedValuesAreComparedByContent) {
  ModelConfig mine = ValidModel();
  ModelConfig theirs = ValidModel();
  std::string bytes(64 * 4, '\0');
  mine.units[0].tensors[1].init = InitSpec::Values(bytes, DType::kFloat32);
  bytes[100] = 1;
  theirs.units[0].tensors[1].init = InitSpec::Values(bytes, DType::kFloat32);
  ExpectDiffers(mine, theirs,
                "units[0].tensors[1].init.values.data: the values differ, "
                "first at byte 100");
}

TEST_F(ModelConfigTest, InitIsIgnoredWhenExcluded) {
  ModelConfig theirs = ValidModel();
  theirs.units[1].tensors[0].init = InitSpec::Constant(1.0f);
  EXPECT_TRUE(CompareModels(ValidModel(), theirs, InitScope::kExclude).ok());
  EXPECT_EQ(Fingerprint(ValidModel(), InitScope::kExclude),
            Fingerprint(theirs, InitScope::kExclude));
  EXPECT_NE(Fingerprint(ValidModel()), Fingerprint(theirs));
}

TEST_F(ModelConfigTest, LayoutsUseTheGatheredDtype) {
  ModelConfig model = ValidModel();
  model.config.param_dtype = DType::kBFloat16;
  auto layouts = BuildLayouts(model, 4);
  ASSERT_TRUE(layouts.ok()) << layouts.status();
  ASSERT_EQ(layouts->size(), 3u);
  EXPECT_EQ((*layouts)[0].dtype(), DType::kBFloat16);
  EXPECT_EQ((*layouts)[0].numel(), 64 * 32 + 64);
  const MemoryOptions options = ToMemoryOptions(model);
  EXPECT_EQ(options.reduce_dtype, DType::kBFloat16);
  EXPECT_EQ(options.optimizer, OptimizerKind::kAdamW);
  EXPECT_EQ(options.max_gathered_units, 2);
}

}  // namespace
}  // namespace shardd::core
