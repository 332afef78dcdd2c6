#include "daemon/core/scoped_cuda_device.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

// A fake of the driver's per-thread binding: which context is current and
// which primary contexts exist. One device's primary context is the
// address of its slot in `primary`.
struct FakeDriver {
  void* current = nullptr;
  bool primary_exists[4] = {};
  char primary[4] = {};
  std::vector<int> set_device_calls;
  int fail_set_device = 0;
};
FakeDriver* driver = nullptr;

int GetCurrent(void** context) {
  *context = driver->current;
  return 0;
}
int SetCurrent(void* context) {
  driver->current = context;
  return 0;
}
int SetDevice(int device) {
  driver->set_device_calls.push_back(device);
  if (driver->fail_set_device != 0) return driver->fail_set_device;
  driver->primary_exists[device] = true;
  driver->current = &driver->primary[device];
  return 0;
}

CudaContextApi FakeApi() {
  CudaContextApi api;
  api.get_current = &GetCurrent;
  api.set_current = &SetCurrent;
  api.set_device = &SetDevice;
  return api;
}

class ScopedCudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { driver = &fake_; }
  void TearDown() override { driver = nullptr; }
  FakeDriver fake_;
};

TEST_F(ScopedCudaDeviceTest,
       FreshThreadIsUnboundAfterwardsAndGpuZeroUntouched) {
  {
    absl::StatusOr<ScopedCudaDevice> scope =
        ScopedCudaDevice::Bind(2, FakeApi());
    ASSERT_TRUE(scope.ok()) << scope.status();
    EXPECT_EQ(fake_.current, &fake_.primary[2]);
  }
  EXPECT_EQ(fake_.current, nullptr);
  EXPECT_FALSE(fake_.primary_exists[0])
      << "restoring must not create GPU 0's primary context";
  EXPECT_EQ(fake_.set_device_calls, std::vector<int>{2});
}

TEST_F(ScopedCudaDeviceTest, RestoresTheContextThatWasBound) {
  char other_context = 0;
  fake_.current = &other_context;
  {
    absl::StatusOr<ScopedCudaDevice> scope =
        ScopedCudaDevice::Bind(1, FakeApi());
    ASSERT_TRUE(scope.ok()) << scope.status();
    EXPECT_EQ(fake_.current, &fake_.primary[1]);
  }
  EXPECT_EQ(fake_.current, &other_context);
}

TEST_F(ScopedCudaDeviceTest, FailedBindLeavesTheThreadAsItWas) {
  fake_.fail_set_device = 101;  // cudaErrorInvalidDevice
  absl::StatusOr<ScopedCudaDevice> scope = ScopedCudaDevice::Bind(3, FakeApi());
  EXPECT_EQ(scope.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(fake_.current, nullptr);
  EXPECT_FALSE(fake_.primary_exists[0]);
}

TEST_F(ScopedCudaDeviceTest, RestoreEarlyThenDestructorDoesNothing) {
  char mine = 0;
  absl::StatusOr<ScopedCudaDevice> scope = ScopedCudaDevice::Bind(0, FakeApi());
  ASSERT_TRUE(scope.ok());
  ASSERT_TRUE(scope->Restore().ok());
  EXPECT_EQ(fake_.current, nullptr);
  fake_.current = &mine;  // The thread binds something else later.
  scope = absl::FailedPreconditionError("gone");  // destroys the scope
  EXPECT_EQ(fake_.current, &mine);
}

TEST_F(ScopedCudaDeviceTest, RejectsNegativeDeviceAndMissingApi) {
  EXPECT_EQ(ScopedCudaDevice::Bind(-1, FakeApi()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScopedCudaDevice::Bind(0, CudaContextApi{}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fake_.set_device_calls.empty());
}

}  // namespace
}  // namespace shardd::core
