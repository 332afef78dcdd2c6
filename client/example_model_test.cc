#include "client/example_model.h"

#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "client/mlp.h"
#include "daemon/core/tensor_init.h"
#include "daemon/node/proto_convert.h"
#include "gtest/gtest.h"

namespace shardd::client {
namespace {

ExampleModelOptions SmallOptions() {
  ExampleModelOptions options;
  options.widths = {3, 5, 2};
  options.init_seed = 7;
  options.strategy = v1::SHARDING_STRATEGY_HYBRID_SHARD;
  options.sharding_factor = 2;
  options.max_grad_norm = 1.0;
  return options;
}

TEST(ExampleModelTest, RequestIsAValidModelOfOneUnitPerLayer) {
  auto model = ExampleModel::Create(SmallOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  const v1::RegisterModelRequest request = model->RegisterRequest();
  // The daemon picks: shared memory on the CPU, CUDA IPC on a GPU.
  EXPECT_EQ(request.transport(), v1::TRANSPORT_UNSPECIFIED);
  auto config = node::ProtoConvert::ModelFromProto(request.model());
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->units.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    const core::UnitSpec expected = model->mlp().UnitSpecFor(l);
    EXPECT_EQ(config->units[l].name, expected.name);
    ASSERT_EQ(config->units[l].tensors.size(), expected.tensors.size());
    for (size_t t = 0; t < expected.tensors.size(); ++t) {
      EXPECT_EQ(config->units[l].tensors[t].spec.name,
                expected.tensors[t].name);
      EXPECT_EQ(config->units[l].tensors[t].spec.shape,
                expected.tensors[t].shape);
    }
    EXPECT_EQ(config->units[l].tensors[0].init.kind, core::InitKind::kNormal);
    EXPECT_EQ(config->units[l].tensors[1].init.kind, core::InitKind::kZeros);
  }
  EXPECT_EQ(config->config.sharding_factor, 2);
  EXPECT_EQ(config->config.max_grad_norm, 1.0);
  EXPECT_NE(model->WeightSeed(0), model->WeightSeed(1));
}

TEST(ExampleModelTest, InitialParamsAreWhatTheDaemonFills) {
  auto model = ExampleModel::Create(SmallOptions());
  ASSERT_TRUE(model.ok());
  auto config =
      node::ProtoConvert::ModelFromProto(model->RegisterRequest().model());
  ASSERT_TRUE(config.ok());
  auto params = model->InitialParams();
  ASSERT_TRUE(params.ok());
  for (int l = 0; l < 2; ++l) {
    const Mlp& mlp = model->mlp();
    ASSERT_EQ((*params)[l].size(), static_cast<size_t>(mlp.ParamCount(l)));
    const int64_t weights = mlp.BiasOffset(l);
    std::vector<float> filled(weights);
    ASSERT_TRUE(core::TensorInit::Fill(config->units[l].tensors[0].init,
                                       weights, 0, filled.data(), weights)
                    .ok());
    for (int64_t k = 0; k < weights; ++k) {
      EXPECT_EQ((*params)[l][k], filled[k]) << "layer " << l << " k " << k;
    }
    for (int64_t k = weights; k < mlp.ParamCount(l); ++k) {
      EXPECT_EQ((*params)[l][k], 0.0f);
    }
  }
}

TEST(ExampleModelTest, WeightsInSharedMemoryAreTheNormalValues) {
  auto model = ExampleModel::Create(SmallOptions());
  ASSERT_TRUE(model.ok());
  const char* tmp = getenv("TEST_TMPDIR");
  absl::StatusOr<InitValuesFile> file =
      model->WriteInitialWeights(tmp != nullptr ? tmp : "/tmp");
  ASSERT_TRUE(file.ok()) << file.status();
  const v1::RegisterModelRequest request = model->RegisterRequest(&*file);
  auto params = model->InitialParams();
  ASSERT_TRUE(params.ok());
  std::ifstream in(file->path(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  for (int l = 0; l < 2; ++l) {
    const v1::TensorInit& init = request.model().units(l).tensors(0).init();
    ASSERT_TRUE(init.has_shared_memory());
    const int64_t weights = model->mlp().BiasOffset(l);
    ASSERT_EQ(init.shared_memory().byte_length(), weights * 4);
    ASSERT_LE(init.shared_memory().byte_offset() + weights * 4,
              static_cast<int64_t>(bytes.size()));
    EXPECT_EQ(std::memcmp(bytes.data() + init.shared_memory().byte_offset(),
                          (*params)[l].data(), weights * 4),
              0)
        << "layer " << l;
    EXPECT_TRUE(request.model().units(l).tensors(1).init().has_zeros());
  }
}

TEST(ExampleModelTest, BadOptionsAreInvalidArgument) {
  ExampleModelOptions options = SmallOptions();
  options.max_gathered_units = 0;
  EXPECT_EQ(ExampleModel::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = SmallOptions();
  options.widths = {3};
  EXPECT_EQ(ExampleModel::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::client
