#include "daemon/node/device_init_support.h"

#include <string>

#include "absl/strings/match.h"
#include "daemon/core/model_config.h"
#include "daemon/node/proto_convert.h"
#include "gtest/gtest.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {
namespace {

// One unit: "w" (normal), "b" (4 fp32 in the trainer's device buffer).
core::ModelConfig ModelWithDeviceInit() {
  v1::ModelSpec spec;
  v1::UnitSpec* unit = spec.add_units();
  unit->set_name("layer");
  v1::TensorSpec* w = unit->add_tensors();
  w->set_name("w");
  w->add_shape(4);
  w->set_dtype(v1::DTYPE_FP32);
  w->mutable_init()->mutable_normal()->set_std(1.0f);
  v1::TensorSpec* b = unit->add_tensors();
  b->set_name("b");
  b->add_shape(4);
  b->set_dtype(v1::DTYPE_FP32);
  v1::CudaIpcRef* ref = b->mutable_init()->mutable_cuda_ipc();
  ref->set_mem_handle(std::string(64, '\1'));
  ref->set_allocation_bytes(16);
  ref->set_byte_length(16);
  spec.mutable_config()->mutable_optimizer()->mutable_sgd()->set_lr(0.1);
  absl::StatusOr<core::ModelConfig> model = ProtoConvert::ModelFromProto(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

class DeviceInitSupportTest : public ::testing::Test {};

TEST_F(DeviceInitSupportTest, ADaemonOnTheCpuRefusesDeviceInitsNamingTheInit) {
  const absl::Status s =
      DeviceInitSupport::CheckBackend(ModelWithDeviceInit(), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(
      s.message(),
      "model.units[0].tensors[1].init.cuda_ipc: an init from a "
      "trainer's device buffer needs a daemon on a GPU"))
      << s;
}

TEST_F(DeviceInitSupportTest, ADaemonOnAGpuTakesThem) {
  EXPECT_TRUE(
      DeviceInitSupport::CheckBackend(ModelWithDeviceInit(), true).ok());
}

TEST_F(DeviceInitSupportTest, ModelsWithoutDeviceInitsPassOnTheCpu) {
  core::ModelConfig model = ModelWithDeviceInit();
  model.units[0].tensors[1].init = core::InitSpec::Zeros();
  EXPECT_TRUE(DeviceInitSupport::CheckBackend(model, false).ok());
}

#ifndef SHARDD_WITH_CUDA
TEST_F(DeviceInitSupportTest, ABuildWithoutCudaAnswersThatItNeedsOne) {
  const core::CudaIpcSource source =
      ModelWithDeviceInit().units[0].tensors[1].init.cuda_ipc;
  const absl::StatusOr<uint32_t> crc =
      DeviceInitSupport::OfThisBuild().Checksum(source, "init.cuda_ipc");
  EXPECT_EQ(crc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(crc.status().message(), "needs a CUDA build"))
      << crc.status();
  float out[4];
  EXPECT_EQ(DeviceInitSupport::OfThisBuild()
                .Read(source, core::DType::kFloat32, 0, 4, out, "f")
                .code(),
            absl::StatusCode::kFailedPrecondition);
}
#endif

}  // namespace
}  // namespace shardd::node
