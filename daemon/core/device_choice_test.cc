#include "daemon/core/device_choice.h"

#include <string>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

const DeviceInventory kNoDriver{true, 0,
                                "CUDA driver version is insufficient for CUDA "
                                "runtime version"};
const DeviceInventory kTwoGpus{true, 2, ""};
const DeviceInventory kCpuBuild{false, 0, ""};

TEST(DeviceChoiceTest, AutoUsesTheFirstGpuWhenOneIsUsable) {
  auto choice = ResolveDevice("auto", kTwoGpus);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->kind, DeviceKind::kCuda);
  EXPECT_EQ(choice->cuda_index, 0);
}

TEST(DeviceChoiceTest, AutoFallsBackToCpuWhenTheDriverIsInsufficient) {
  auto choice = ResolveDevice("auto", kNoDriver);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->kind, DeviceKind::kCpu);
  EXPECT_NE(choice->reason.find("insufficient"), std::string::npos);
  auto cpu_build = ResolveDevice("auto", kCpuBuild);
  ASSERT_TRUE(cpu_build.ok());
  EXPECT_EQ(cpu_build->kind, DeviceKind::kCpu);
  EXPECT_NE(cpu_build->reason.find("built without CUDA"), std::string::npos);
}

TEST(DeviceChoiceTest, ExplicitCudaIndexIsHonoured) {
  auto choice = ResolveDevice("cuda:1", kTwoGpus);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->kind, DeviceKind::kCuda);
  EXPECT_EQ(choice->cuda_index, 1);
}

TEST(DeviceChoiceTest, ExplicitCudaWithoutADeviceIsAFailedPrecondition) {
  EXPECT_EQ(ResolveDevice("cuda:0", kNoDriver).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveDevice("cuda:2", kTwoGpus).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto cpu_build = ResolveDevice("cuda:0", kCpuBuild);
  EXPECT_EQ(cpu_build.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cpu_build.status().message().find("--config=cuda"),
            std::string::npos);
}

const DeviceSupport kNoGpuDataPlane{false, "no GPU data plane in this build"};

TEST(DeviceChoiceTest, AutoUsesCpuWhenTheConsumerCannotUseTheGpu) {
  auto choice = ResolveDevice("auto", kTwoGpus, kNoGpuDataPlane);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->kind, DeviceKind::kCpu);
  EXPECT_EQ(choice->reason,
            "auto: 2 CUDA device(s) usable, but no GPU data plane in this "
            "build; using CPU");
  // Without a device the usual reason stays.
  auto no_driver = ResolveDevice("auto", kNoDriver, kNoGpuDataPlane);
  ASSERT_TRUE(no_driver.ok());
  EXPECT_NE(no_driver->reason.find("insufficient"), std::string::npos);
}

TEST(DeviceChoiceTest, ExplicitCudaTheConsumerCannotUseIsAFailedPrecondition) {
  auto choice = ResolveDevice("cuda:0", kTwoGpus, kNoGpuDataPlane);
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(choice.status().message().find("no GPU data plane in this build"),
            std::string::npos);
  EXPECT_TRUE(ResolveDevice("cpu", kTwoGpus, kNoGpuDataPlane).ok());
}

TEST(DeviceChoiceTest, RejectsMalformedDeviceNames) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", ""}) {
    auto choice = ResolveDevice(bad, kTwoGpus);
    EXPECT_EQ(choice.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(DeviceChoiceTest, CpuIsAlwaysAvailable) {
  auto choice = ResolveDevice("cpu", kTwoGpus);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->kind, DeviceKind::kCpu);
}

}  // namespace
}  // namespace shardd::core
