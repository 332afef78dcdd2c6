#include "daemon/memory/memory_limit_reader.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

std::string Fixture(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".",
                      "/shardd/daemon/memory/testdata/", name);
}

std::vector<core::MemoryLimit> Of(const LimitReading& reading,
                                  core::LimitScope scope) {
  std::vector<core::MemoryLimit> out;
  for (const core::MemoryLimit& limit : reading.limits) {
    if (limit.scope == scope) out.push_back(limit);
  }
  return out;
}

const core::MemoryLimit* WithSource(const LimitReading& reading,
                                    absl::string_view prefix) {
  for (const core::MemoryLimit& limit : reading.limits) {
    if (absl::StartsWith(limit.source, prefix)) return &limit;
  }
  return nullptr;
}

MemoryLimitOptions Options(std::string root, std::string shm_dir = "") {
  MemoryLimitOptions options;
  options.root = std::move(root);
  options.shm_dir = std::move(shm_dir);
  return options;
}

class MemoryLimitReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/reader-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  }
  void Write(const std::string& path, const std::string& content) {
    const std::string full = absl::StrCat(dir_, path);
    for (size_t slash = full.find('/', dir_.size() + 1);
         slash != std::string::npos; slash = full.find('/', slash + 1)) {
      mkdir(full.substr(0, slash).c_str(), 0700);
    }
    std::ofstream(full) << content;
  }
  std::string dir_;
};

TEST_F(MemoryLimitReaderTest, CgroupV2FixtureGivesThePodLimitTheTightest) {
  MemoryLimitReader reader(Options(Fixture("cgroup_v2")));
  const LimitReading reading = reader.Read();
  EXPECT_TRUE(reading.unreadable.empty())
      << testing::PrintToString(reading.unreadable);
  const core::MemoryLimit* cgroup = WithSource(reading, "cgroup");
  ASSERT_NE(cgroup, nullptr);
  // Pod: 4 GiB limit, 1 GiB current of which 256 MiB inactive file cache.
  // (The container's own 8 GiB leaves more; the slice above has none.)
  EXPECT_EQ(cgroup->scope, core::LimitScope::kHost);
  EXPECT_TRUE(cgroup->measured);
  EXPECT_EQ(cgroup->available_bytes, 4096 * kMiB - 768 * kMiB);
  EXPECT_EQ(cgroup->source,
            "cgroup v2 memory.max of "
            "/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice (4.00 GiB "
            "limit, 768.00 MiB in use)");
  const core::MemoryLimit* meminfo =
      WithSource(reading, "/proc/meminfo MemAvailable");
  ASSERT_NE(meminfo, nullptr);
  EXPECT_EQ(meminfo->available_bytes, int64_t{16777216} * 1024);
  EXPECT_EQ(Of(reading, core::LimitScope::kHost).size(), 2u);
}

TEST_F(MemoryLimitReaderTest, CgroupV1FixtureReadsTheContainersMountRoot) {
  MemoryLimitReader reader(Options(Fixture("cgroup_v1")));
  const LimitReading reading = reader.Read();
  EXPECT_TRUE(reading.unreadable.empty())
      << testing::PrintToString(reading.unreadable);
  const core::MemoryLimit* cgroup = WithSource(reading, "cgroup");
  ASSERT_NE(cgroup, nullptr);
  // 512 MiB limit, 100 MiB used of which 20 MiB (hierarchical) inactive.
  EXPECT_EQ(cgroup->available_bytes, 432 * kMiB);
  EXPECT_EQ(cgroup->source,
            "cgroup v1 memory.limit_in_bytes of /sys/fs/cgroup/memory "
            "(512.00 MiB limit, 80.00 MiB in use)");
}

TEST_F(MemoryLimitReaderTest, UnlimitedHierarchyGivesNoCgroupLimit) {
  Write("/proc/self/cgroup", "4:memory:/a/b\n0::/\n");
  Write("/proc/self/mountinfo",
        "34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
  Write("/proc/meminfo", "MemAvailable: 1024 kB\n");
  for (const char* dir : {"", "/a", "/a/b"}) {
    Write(absl::StrCat("/sys/fs/cgroup/memory", dir, "/memory.limit_in_bytes"),
          "9223372036854771712\n");
    Write(absl::StrCat("/sys/fs/cgroup/memory", dir, "/memory.usage_in_bytes"),
          "1000\n");
  }
  // The unified hierarchy has no memory controller: no files at all.
  MemoryLimitReader reader(Options(dir_));
  const LimitReading reading = reader.Read();
  EXPECT_EQ(WithSource(reading, "cgroup"), nullptr);
  EXPECT_TRUE(reading.unreadable.empty())
      << testing::PrintToString(reading.unreadable);
  ASSERT_EQ(reading.limits.size(), 1u);
  EXPECT_EQ(reading.limits[0].available_bytes, 1024 * 1024);
}

TEST_F(MemoryLimitReaderTest, AncestorLimitBindsAndGarbageIsReported) {
  Write("/proc/self/cgroup", "0::/job/task\n");
  Write("/proc/self/mountinfo",
        "30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  Write("/sys/fs/cgroup/job/memory.max", "1073741824\n");
  Write("/sys/fs/cgroup/job/memory.current", "1200000000\n");  // Over.
  Write("/sys/fs/cgroup/job/task/memory.max", "banana\n");
  MemoryLimitReader reader(Options(dir_));
  const LimitReading reading = reader.Read();
  const core::MemoryLimit* cgroup = WithSource(reading, "cgroup");
  ASSERT_NE(cgroup, nullptr);
  EXPECT_EQ(cgroup->available_bytes, 0);  // Never negative.
  EXPECT_TRUE(absl::StrContains(cgroup->source, "/sys/fs/cgroup/job ("));
  ASSERT_EQ(reading.unreadable.size(), 2u);  // The limit and the meminfo.
  EXPECT_TRUE(absl::StrContains(reading.unreadable[0], "'banana'"));
  EXPECT_TRUE(absl::StrContains(reading.unreadable[1], "/proc/meminfo"));
}

TEST_F(MemoryLimitReaderTest, ShmDirectoryFreeSpaceIsAShmLimit) {
  MemoryLimitReader reader(Options(dir_, dir_));
  const LimitReading reading = reader.Read();
  const std::vector<core::MemoryLimit> shm =
      Of(reading, core::LimitScope::kShm);
  ASSERT_EQ(shm.size(), 1u);
  struct statvfs fs;
  ASSERT_EQ(statvfs(dir_.c_str(), &fs), 0);
  const int64_t total = static_cast<int64_t>(fs.f_blocks) * fs.f_frsize;
  EXPECT_GT(shm[0].available_bytes, 0);
  EXPECT_LE(shm[0].available_bytes, total);
  EXPECT_TRUE(absl::StartsWith(shm[0].source,
                               absl::StrCat("free space of ", dir_, " (a ")));
  MemoryLimitReader missing(Options(dir_, dir_ + "/none"));
  const LimitReading none = missing.Read();
  EXPECT_TRUE(Of(none, core::LimitScope::kShm).empty());
  EXPECT_TRUE(absl::StrContains(testing::PrintToString(none.unreadable),
                                "statvfs " + dir_ + "/none"));
}

TEST_F(MemoryLimitReaderTest, ExplicitAndDeviceLimits) {
  MemoryLimitOptions options = Options(dir_);
  options.explicit_limit_bytes = 123456789;
  options.device_memory = [] {
    return absl::StatusOr<DeviceMemoryInfo>(
        DeviceMemoryInfo{70 * kMiB, 80 * kMiB});
  };
  options.device_name = "cuda:0";
  MemoryLimitReader reader(options);
  const LimitReading reading = reader.Read();
  const std::vector<core::MemoryLimit> total =
      Of(reading, core::LimitScope::kTotal);
  ASSERT_EQ(total.size(), 1u);
  EXPECT_FALSE(total[0].measured);
  EXPECT_EQ(total[0].available_bytes, 123456789);
  EXPECT_EQ(total[0].source, "--memory_limit_bytes=123456789");
  const std::vector<core::MemoryLimit> device =
      Of(reading, core::LimitScope::kDevice);
  ASSERT_EQ(device.size(), 1u);
  EXPECT_EQ(device[0].available_bytes, 70 * kMiB);
  EXPECT_EQ(device[0].source,
            "cudaMemGetInfo of cuda:0 (70.00 MiB free of 80.00 MiB)");
}

TEST(MemoryLimitReaderRealTest, ThisMachineHasMemAvailable) {
  const LimitReading reading = MemoryLimitReader(Options("")).Read();
  EXPECT_NE(WithSource(reading, "/proc/meminfo MemAvailable"), nullptr);
  for (const core::MemoryLimit& limit : reading.limits) {
    EXPECT_GE(limit.available_bytes, 0) << limit.source;
  }
}

}  // namespace
}  // namespace shardd::memory
