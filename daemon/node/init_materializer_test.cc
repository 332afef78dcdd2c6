#include "daemon/node/init_materializer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/dtype.h"
#include "daemon/core/model_config.h"
#include "daemon/core/tensor_init.h"
#include "daemon/core/unit_layout.h"
#include "daemon/node/proto_convert.h"
#include "daemon/node/testing/host_device_init_reader.h"
#include "gtest/gtest.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {
namespace {

v1::TensorSpec* AddTensor(v1::UnitSpec* unit, const std::string& name,
                          std::vector<int64_t> shape) {
  v1::TensorSpec* t = unit->add_tensors();
  t->set_name(name);
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(v1::DTYPE_FP32);
  return t;
}

// Two units with odd sizes, so that shards are padded and tensors straddle
// shard boundaries.
v1::ModelSpec UniformModel(v1::AlignmentMode mode, int64_t block) {
  v1::ModelSpec spec;
  v1::UnitSpec* a = spec.add_units();
  a->set_name("a");
  v1::UniformInit* w =
      AddTensor(a, "w", {37, 11})->mutable_init()->mutable_uniform();
  w->set_seed(1);
  w->set_low(-0.3f);
  w->set_high(0.3f);
  v1::UniformInit* b =
      AddTensor(a, "b", {37})->mutable_init()->mutable_uniform();
  b->set_seed(2);
  b->set_low(0.0f);
  b->set_high(1.0f);
  v1::UnitSpec* c = spec.add_units();
  c->set_name("c");
  v1::UniformInit* x =
      AddTensor(c, "x", {101})->mutable_init()->mutable_uniform();
  x->set_seed(3);
  x->set_low(-2.0f);
  x->set_high(-1.0f);
  spec.mutable_config()->set_strategy(v1::SHARDING_STRATEGY_FULL_SHARD);
  spec.mutable_config()->mutable_default_alignment()->set_mode(mode);
  spec.mutable_config()->mutable_default_alignment()->set_block_elements(block);
  spec.mutable_config()->mutable_optimizer()->mutable_sgd()->set_lr(0.1);
  return spec;
}

// Every rank's shard materialised on its own, concatenated (padding
// dropped): the unit's real elements in flat order.
// Device buffers are read by `device`, else by this build's reader.
std::vector<std::vector<float>> Concatenated(
    const core::ModelConfig& model, int64_t factor,
    DeviceInitReader* device = nullptr) {
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(model, factor);
  EXPECT_TRUE(layouts.ok()) << layouts.status();
  InitMaterializer materializer =
      device != nullptr ? InitMaterializer(model, *layouts, *device)
                        : InitMaterializer(model, *layouts);
  std::vector<std::vector<float>> units;
  for (size_t u = 0; u < layouts->size(); ++u) {
    std::vector<float>& flat = units.emplace_back();
    for (int64_t i = 0; i < factor; ++i) {
      const core::ShardRange& shard = (*layouts)[u].shard(i);
      std::vector<float> mine(shard.numel);
      materializer.Fill(static_cast<int>(u), shard.offset, mine.data(),
                        shard.numel);
      flat.insert(flat.end(), mine.begin(), mine.end());
    }
  }
  EXPECT_TRUE(materializer.status().ok()) << materializer.status();
  return units;
}

class InitMaterializerTest : public ::testing::Test {};

TEST_F(InitMaterializerTest, UniformShardsConcatenatedAreTheSameForAnyWAndF) {
  for (const auto& [mode, block] :
       std::vector<std::pair<v1::AlignmentMode, int64_t>>{
           {v1::ALIGNMENT_MODE_ELEMENT, 0},
           {v1::ALIGNMENT_MODE_BLOCK, 8},
           {v1::ALIGNMENT_MODE_WHOLE_TENSOR, 0}}) {
    absl::StatusOr<core::ModelConfig> model =
        ProtoConvert::ModelFromProto(UniformModel(mode, block));
    ASSERT_TRUE(model.ok()) << model.status();
    const std::vector<std::vector<float>> whole = Concatenated(*model, 1);
    // The values are the formula's, element by element.
    ASSERT_EQ(whole[0].size(), 37u * 11 + 37);
    EXPECT_EQ(whole[0][5], core::TensorInit::UniformAt(1, -0.3f, 0.3f, 5));
    EXPECT_EQ(whole[0][37 * 11 + 2],
              core::TensorInit::UniformAt(2, 0.0f, 1.0f, 2));
    EXPECT_EQ(whole[1][100], core::TensorInit::UniformAt(3, -2.0f, -1.0f, 100));
    // W = 2 and 4 with F = W, W = 4 with F = 2, and F = 3: the shard
    // layout depends only on F.
    for (int64_t factor : {2, 4, 3}) {
      EXPECT_EQ(Concatenated(*model, factor), whole)
          << "F = " << factor << ", alignment mode " << mode;
    }
  }
}

class SharedMemoryInitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    path_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/values-XXXXXX";
    const int fd = mkstemp(path_.data());
    ASSERT_GE(fd, 0);
    // 8 junk bytes, then tensor w (40 x 3) and tensor b (40) as fp32.
    std::string bytes(8, 'j');
    for (int i = 0; i < 160; ++i) {
      const float v = 0.125f * static_cast<float>(i) - 3.0f;
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    }
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
    close(fd);
  }
  void TearDown() override { unlink(path_.c_str()); }

  v1::ModelSpec Spec() const {
    v1::ModelSpec spec;
    v1::UnitSpec* unit = spec.add_units();
    unit->set_name("layer");
    v1::SharedMemoryRef* w =
        AddTensor(unit, "w", {40, 3})->mutable_init()->mutable_shared_memory();
    w->set_path(path_);
    w->set_segment_bytes(8 + 160 * 4);
    w->set_byte_offset(8);
    w->set_byte_length(120 * 4);
    v1::SharedMemoryRef* b =
        AddTensor(unit, "b", {40})->mutable_init()->mutable_shared_memory();
    *b = *w;
    b->set_byte_offset(8 + 120 * 4);
    b->set_byte_length(40 * 4);
    spec.mutable_config()->mutable_optimizer()->mutable_sgd()->set_lr(0.1);
    return spec;
  }

  std::string path_;
};

TEST_F(SharedMemoryInitTest, EachShardReadsItsSliceOfTheTrainersValues) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(Spec());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> expected;
  for (int i = 0; i < 160; ++i) {
    expected.push_back(0.125f * static_cast<float>(i) - 3.0f);
  }
  for (int64_t factor : {1, 2, 3, 7}) {
    EXPECT_EQ(Concatenated(*model, factor)[0], expected) << "F = " << factor;
  }
}

TEST_F(SharedMemoryInitTest, AVanishedSegmentIsAnErrorNamingTheTensor) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(Spec());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(*model, 2);
  ASSERT_TRUE(layouts.ok());
  unlink(path_.c_str());
  InitMaterializer materializer(*model, *layouts);
  const core::ShardRange& shard = (*layouts)[0].shard(1);
  std::vector<float> out(shard.numel);
  materializer.Fill(0, shard.offset, out.data(), shard.numel);
  EXPECT_EQ(materializer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(materializer.status().message(),
                                "units[0].tensors[0].init.shared_memory"))
      << materializer.status();
}

// A trainer's device buffer (cuda_ipc), read through a host-memory stand-in
// for the CUDA reader: w (40 x 3, fp32) after 8 junk bytes, b (40, bf16).
class CudaIpcInitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string bytes(8, 'j');
    for (int i = 0; i < 120; ++i) {
      const float v = 0.25f * static_cast<float>(i) - 7.0f;
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    }
    for (int i = 0; i < 40; ++i) {
      const uint16_t bits =
          core::FloatToBFloat16(1.5f * static_cast<float>(i) - 20.0f);
      bytes.append(reinterpret_cast<const char*>(&bits), 2);
    }
    allocation_bytes_ = static_cast<int64_t>(bytes.size());
    handle_ = device_.Add(std::move(bytes));
  }

  v1::ModelSpec Spec() const {
    v1::ModelSpec spec;
    v1::UnitSpec* fp32 = spec.add_units();
    fp32->set_name("fp32");
    v1::CudaIpcRef* w =
        AddTensor(fp32, "w", {40, 3})->mutable_init()->mutable_cuda_ipc();
    w->set_mem_handle(handle_);
    w->set_pci_bus_id("0000:3b:00.0");
    w->set_allocation_bytes(allocation_bytes_);
    w->set_byte_offset(8);
    w->set_byte_length(120 * 4);
    v1::UnitSpec* bf16 = spec.add_units();
    bf16->set_name("bf16");
    v1::TensorSpec* b = AddTensor(bf16, "b", {40});
    b->set_dtype(v1::DTYPE_BF16);
    *b->mutable_init()->mutable_cuda_ipc() = *w;
    b->mutable_init()->mutable_cuda_ipc()->set_byte_offset(8 + 120 * 4);
    b->mutable_init()->mutable_cuda_ipc()->set_byte_length(40 * 2);
    spec.mutable_config()->mutable_optimizer()->mutable_sgd()->set_lr(0.1);
    return spec;
  }

  testing::HostDeviceInitReader device_;
  std::string handle_;
  int64_t allocation_bytes_ = 0;
};

TEST_F(CudaIpcInitTest, EachShardReadsOnlyItsSliceOfTheDeviceBuffer) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(Spec());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> w, b;
  for (int i = 0; i < 120; ++i) w.push_back(0.25f * i - 7.0f);
  for (int i = 0; i < 40; ++i) b.push_back(1.5f * i - 20.0f);
  for (int64_t factor : {1, 2, 3, 7}) {
    const std::vector<std::vector<float>> units =
        Concatenated(*model, factor, &device_);
    EXPECT_EQ(units[0], w) << "F = " << factor;
    EXPECT_EQ(units[1], b) << "F = " << factor;
  }
  // One rank of F = 4 reads only the bytes of its shard of each unit.
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(*model, 4);
  ASSERT_TRUE(layouts.ok());
  testing::HostDeviceInitReader device;
  std::string bytes(8 + 160 * 4, 'x');
  const std::string handle = device.Add(bytes);
  v1::ModelSpec spec = Spec();
  spec.mutable_units(0)
      ->mutable_tensors(0)
      ->mutable_init()
      ->mutable_cuda_ipc()
      ->set_mem_handle(handle);
  absl::StatusOr<core::ModelConfig> other = ProtoConvert::ModelFromProto(spec);
  ASSERT_TRUE(other.ok());
  InitMaterializer materializer(*other, *layouts, device);
  const core::ShardRange& shard = (*layouts)[0].shard(2);
  std::vector<float> out(shard.numel);
  materializer.Fill(0, shard.offset, out.data(), shard.numel);
  ASSERT_TRUE(materializer.status().ok()) << materializer.status();
  const int64_t end = std::min<int64_t>(shard.offset + shard.numel, 120);
  ASSERT_EQ(device.reads().size(), 1u);
  EXPECT_EQ(device.reads()[0].first, 8 + shard.offset * 4);
  EXPECT_EQ(device.reads()[0].second, 8 + end * 4);
}

TEST_F(CudaIpcInitTest, AFreedBufferIsAnErrorNamingTheTensor) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(Spec());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(*model, 2);
  ASSERT_TRUE(layouts.ok());
  device_.Remove(handle_);
  InitMaterializer materializer(*model, *layouts, device_);
  const core::ShardRange& shard = (*layouts)[1].shard(1);
  std::vector<float> out(shard.numel);
  materializer.Fill(1, shard.offset, out.data(), shard.numel);
  EXPECT_EQ(materializer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(materializer.status().message(),
                                "units[1].tensors[0].init.cuda_ipc"))
      << materializer.status();
}

#ifndef SHARDD_WITH_CUDA
TEST_F(CudaIpcInitTest, ABuildWithoutCudaRefusesDeviceInits) {
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(Spec());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(*model, 1);
  ASSERT_TRUE(layouts.ok());
  InitMaterializer materializer(*model, *layouts);
  std::vector<float> out((*layouts)[0].shard(0).numel);
  materializer.Fill(0, 0, out.data(), static_cast<int64_t>(out.size()));
  EXPECT_EQ(materializer.status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(materializer.status().message(), "needs a CUDA build"))
      << materializer.status();
}
#endif

}  // namespace
}  // namespace shardd::node
