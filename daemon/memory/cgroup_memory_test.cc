#include "daemon/memory/cgroup_memory.h"

#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

TEST(CgroupMemoryTest, ProcSelfCgroupGivesTheV2AndTheV1MemoryPaths) {
  const ProcCgroup hybrid = ParseProcSelfCgroup(
      "9:name=systemd:/\n"
      "4:memory:/process_api/5b76\n"
      "2:cpu,cpuacct:/\n"
      "0::/\n");
  EXPECT_EQ(hybrid.v1_memory_path, "/process_api/5b76");
  EXPECT_EQ(hybrid.v2_path, "/");
  const ProcCgroup v2 = ParseProcSelfCgroup("0::/user.slice/a:b.scope\n");
  EXPECT_EQ(v2.v2_path, "/user.slice/a:b.scope");  // ':' in the path.
  EXPECT_FALSE(v2.v1_memory_path.has_value());
  const ProcCgroup combined =
      ParseProcSelfCgroup("5:cpuset,memory,pids:/job\ngarbage\n\n");
  EXPECT_EQ(combined.v1_memory_path, "/job");
  EXPECT_FALSE(combined.v2_path.has_value());
}

TEST(CgroupMemoryTest, MountinfoListsCgroup2AndV1MemoryMountsOnly) {
  const std::vector<CgroupMount> mounts = ParseCgroupMounts(
      "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "34 30 0:31 /docker/x /sys/fs/cgroup/memory rw,relatime master:15 - "
      "cgroup cgroup rw,memory\n"
      "40 30 0:37 / /sys/fs/cgroup/uni\\040fied rw shared:9 - cgroup2 "
      "cgroup2 rw,nsdelegate\n"
      "short line\n");
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_FALSE(mounts[0].v2);
  EXPECT_EQ(mounts[0].root, "/docker/x");
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup/memory");
  EXPECT_TRUE(mounts[1].v2);
  EXPECT_EQ(mounts[1].root, "/");
  EXPECT_EQ(mounts[1].mount_point, "/sys/fs/cgroup/uni fied");
}

TEST(CgroupMemoryTest, CgroupDirectoryMapsThePathBelowTheMountRoot) {
  const CgroupMount host{true, "/", "/sys/fs/cgroup"};
  EXPECT_EQ(CgroupDirectory(host, "/a/b"), "/sys/fs/cgroup/a/b");
  EXPECT_EQ(CgroupDirectory(host, "/"), "/sys/fs/cgroup");
  const CgroupMount container{false, "/docker/x", "/sys/fs/cgroup/memory"};
  EXPECT_EQ(CgroupDirectory(container, "/docker/x"), "/sys/fs/cgroup/memory");
  EXPECT_EQ(CgroupDirectory(container, "/docker/x/child"),
            "/sys/fs/cgroup/memory/child");
  EXPECT_FALSE(CgroupDirectory(container, "/other").has_value());
  EXPECT_FALSE(CgroupDirectory(container, "/docker/xy").has_value());
}

TEST(CgroupMemoryTest, LimitsParseMaxAndV1UnlimitedAsNoLimit) {
  EXPECT_EQ(*ParseCgroupLimit("536870912\n"), std::optional<int64_t>(1 << 29));
  EXPECT_FALSE(ParseCgroupLimit("max\n")->has_value());
  EXPECT_FALSE(ParseCgroupLimit("9223372036854771712\n")->has_value());
  EXPECT_FALSE(ParseCgroupLimit("18446744073709551615\n")->has_value());
  const absl::StatusOr<std::optional<int64_t>> bad = ParseCgroupLimit("-1");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'-1'"), std::string::npos);
  EXPECT_FALSE(ParseCgroupLimit("").ok());
}

TEST(CgroupMemoryTest, UsageAndStatValues) {
  EXPECT_EQ(*ParseCgroupBytes("1244200960\n"), 1244200960);
  EXPECT_FALSE(ParseCgroupBytes("lots").ok());
  const char* stat =
      "cache 41943040\ninactive_file 10485760\ntotal_inactive_file "
      "20971520\n";
  EXPECT_EQ(ParseKeyedValue(stat, "total_inactive_file"), 20971520);
  EXPECT_EQ(ParseKeyedValue(stat, "inactive_file"), 10485760);
  EXPECT_FALSE(ParseKeyedValue(stat, "active_file").has_value());
}

TEST(CgroupMemoryTest, MemAvailableInBytes) {
  EXPECT_EQ(*ParseMemAvailable("MemTotal: 24683756 kB\n"
                               "MemFree:    100 kB\n"
                               "MemAvailable:   23850944 kB\n"),
            int64_t{23850944} * 1024);
  EXPECT_EQ(ParseMemAvailable("MemTotal: 1 kB\n").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseMemAvailable("MemAvailable: many\n").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::memory
