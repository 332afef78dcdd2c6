#include "daemon/memory/device_probe.h"

#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

// Runs in both builds. Without a GPU (this CI) the probe must say "CPU only"
// with a reason instead of failing; with one it must count it.
TEST(DeviceProbeTest, ReportsDevicesOrAReasonForNone) {
  const core::DeviceInventory inventory = ProbeDevices();
  EXPECT_GE(inventory.cuda_device_count, 0);
  if (inventory.cuda_device_count == 0) {
    EXPECT_FALSE(inventory.cuda_unavailable_reason.empty());
  }
#ifdef SHARDD_WITH_CUDA
  EXPECT_TRUE(inventory.cuda_compiled);
  const RuntimeVersions versions = ProbeRuntimeVersions();
  EXPECT_GT(versions.cuda_runtime, 0);
  EXPECT_GT(versions.nccl, 0);
#else
  EXPECT_FALSE(inventory.cuda_compiled);
  EXPECT_EQ(ProbeRuntimeVersions().nccl, 0);
#endif
}

TEST(DeviceProbeTest, DeviceMemoryIsReportedOrRefusedWithAReason) {
  absl::StatusOr<DeviceMemoryInfo> info = ProbeDeviceMemory(0);
#ifdef SHARDD_WITH_CUDA
  if (ProbeDevices().cuda_device_count > 0) {
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_GT(info->total_bytes, 0);
    EXPECT_LE(info->free_bytes, info->total_bytes);
    return;
  }
  EXPECT_FALSE(info.ok());
#else
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
#endif
  EXPECT_FALSE(info.status().message().empty());
}

}  // namespace
}  // namespace shardd::memory
