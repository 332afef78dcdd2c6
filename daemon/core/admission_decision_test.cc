#include "daemon/core/admission_decision.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

MemoryLimit Measured(LimitScope scope, int64_t bytes, std::string source) {
  return MemoryLimit{scope, bytes, true, std::move(source)};
}

MemoryLimit Explicit(int64_t bytes) {
  return MemoryLimit{LimitScope::kTotal, bytes, false, "--memory_limit_bytes"};
}

AdmissionPlan HostPlan(int64_t host, int64_t shm) {
  AdmissionPlan plan;
  plan.Add("optimizer state", host, MemoryPlacement::kHost);
  plan.Add("gradient slot", shm, MemoryPlacement::kSharedHost);
  return plan;
}

TEST(AdmissionDecisionTest, SafetyMarginIsAtLeast256MiBAndOneTwentieth) {
  for (LimitScope scope : {LimitScope::kHost, LimitScope::kDevice}) {
    EXPECT_EQ(SafetyMargin(scope, 0), 256 * kMiB);
    EXPECT_EQ(SafetyMargin(scope, 1 * kGiB), 256 * kMiB);
    EXPECT_EQ(SafetyMargin(scope, 20 * kGiB), 1 * kGiB);
  }
  // Shm space: one twentieth, no floor (a 64 MiB /dev/shm stays usable).
  EXPECT_EQ(SafetyMargin(LimitScope::kShm, 64 * kMiB), 64 * kMiB / 20);
}

TEST(AdmissionDecisionTest, UsableBytesKeepsTheMarginOrTheFraction) {
  const MemoryLimit limit =
      Measured(LimitScope::kHost, 20 * kGiB, "/proc/meminfo MemAvailable");
  EXPECT_EQ(UsableBytes(limit, 1.0), 19 * kGiB);
  EXPECT_EQ(UsableBytes(limit, 0.5), 10 * kGiB);
  // The fraction only ever adds headroom.
  EXPECT_EQ(UsableBytes(limit, 0.99), 19 * kGiB);
  EXPECT_EQ(UsableBytes(Measured(LimitScope::kHost, 100 * kMiB, "x"), 1.0), 0);
  EXPECT_EQ(UsableBytes(Explicit(100 * kMiB), 0.5), 100 * kMiB);
}

TEST(AdmissionDecisionTest, RefusesPlanOverMeasuredLimitNamingSourceAndPlan) {
  const std::vector<MemoryLimit> limits = {
      Measured(LimitScope::kHost, 20 * kGiB, "/proc/meminfo MemAvailable"),
      Measured(LimitScope::kHost, 4 * kGiB,
               "cgroup v2 memory.max of /sys/fs/cgroup/job")};
  const absl::Status s = DecideAdmission(
      "RegisterModel", HostPlan(200 * kGiB, 72 * kGiB), limits, 1.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  const std::string m(s.message());
  EXPECT_TRUE(absl::StartsWith(
      m, "RegisterModel: the plan does not fit in memory: it needs 272.00 GiB"))
      << m;
  // The binding limit (the smaller one), less its margin, exactly.
  EXPECT_TRUE(absl::StrContains(
      m, absl::StrCat("of host memory, which may use 3.75 GiB (",
                      4 * kGiB - 256 * kMiB,
                      " B): cgroup v2 memory.max of /sys/fs/cgroup/job "
                      "leaves 4.00 GiB, less a safety margin of 256.00 MiB")))
      << m;
  EXPECT_TRUE(absl::StrContains(m,
                                "Plan: optimizer state 200.00 GiB, "
                                "gradient slot 72.00 GiB (shm); host "
                                "272.00 GiB (of it shm 72.00 GiB), device 0 B"))
      << m;
  EXPECT_TRUE(absl::StrContains(m, "/proc/meminfo MemAvailable")) << m;
}

TEST(AdmissionDecisionTest, ExplicitLimitAdmitsJustUnderAndRefusesJustOver) {
  const AdmissionPlan plan = HostPlan(600 * kMiB, 400 * kMiB);
  EXPECT_TRUE(DecideAdmission("x", plan, {Explicit(1000 * kMiB)}, 1.0).ok());
  const absl::Status over =
      DecideAdmission("x", plan, {Explicit(1000 * kMiB - 1)}, 1.0);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(), "of planned memory"))
      << over.message();
  EXPECT_TRUE(absl::StrContains(over.message(), "--memory_limit_bytes"))
      << over.message();
}

TEST(AdmissionDecisionTest, MeasuredLimitAdmitsExactlyUpToTheMargin) {
  const int64_t available = 4 * kGiB;
  const int64_t usable = available - 256 * kMiB;
  const std::vector<MemoryLimit> limits = {
      Measured(LimitScope::kHost, available, "meminfo")};
  EXPECT_TRUE(DecideAdmission("x", HostPlan(usable, 0), limits, 1.0).ok());
  EXPECT_FALSE(DecideAdmission("x", HostPlan(usable + 1, 0), limits, 1.0).ok());
}

TEST(AdmissionDecisionTest, ShmSpaceBoundsOnlySharedMemoryBytes) {
  const std::vector<MemoryLimit> limits = {
      Measured(LimitScope::kHost, 64 * kGiB, "meminfo"),
      Measured(LimitScope::kShm, 1 * kGiB, "free space of /dev/shm")};
  // 10 GiB private is fine; 1 GiB of segments is not (usable 1/20 less).
  EXPECT_TRUE(
      DecideAdmission("x", HostPlan(10 * kGiB, 972 * kMiB), limits, 1.0).ok());
  const absl::Status s =
      DecideAdmission("x", HostPlan(10 * kGiB, 1 * kGiB), limits, 1.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "of shm space"));
  EXPECT_TRUE(absl::StrContains(s.message(), "free space of /dev/shm"));
  EXPECT_FALSE(absl::StrContains(s.message(), "of host memory, which"));
}

TEST(AdmissionDecisionTest, DeviceBytesCountOnlyAgainstTheDevice) {
  AdmissionPlan plan;
  plan.Add("parameter shards", 30 * kGiB, MemoryPlacement::kDevice);
  plan.Add("staging", 32 * kMiB, MemoryPlacement::kHost);
  const std::vector<MemoryLimit> small_host = {
      Measured(LimitScope::kHost, 1 * kGiB, "meminfo"),
      Measured(LimitScope::kDevice, 80 * kGiB, "cudaMemGetInfo cuda:0")};
  EXPECT_TRUE(DecideAdmission("x", plan, small_host, 1.0).ok());
  const std::vector<MemoryLimit> small_device = {
      Measured(LimitScope::kDevice, 16 * kGiB, "cudaMemGetInfo cuda:0")};
  const absl::Status s = DecideAdmission("x", plan, small_device, 1.0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "of device memory"));
}

TEST(AdmissionDecisionTest, EveryScopeOverIsNamed) {
  const std::vector<MemoryLimit> limits = {
      Measured(LimitScope::kHost, 1 * kGiB, "meminfo"),
      Measured(LimitScope::kShm, 1 * kGiB, "statvfs"), Explicit(1 * kGiB)};
  const absl::Status s =
      DecideAdmission("x", HostPlan(2 * kGiB, 2 * kGiB), limits, 1.0);
  EXPECT_TRUE(absl::StrContains(s.message(), "of host memory"));
  EXPECT_TRUE(absl::StrContains(s.message(), "of shm space"));
  EXPECT_TRUE(absl::StrContains(s.message(), "of planned memory"));
}

TEST(AdmissionDecisionTest, NoLimitsAdmitsAndSaysSo) {
  EXPECT_TRUE(DecideAdmission("x", HostPlan(1, 1), {}, 1.0).ok());
  EXPECT_EQ(DescribeLimits({}, 1.0), "none could be read");
  EXPECT_TRUE(CheckScopes(HostPlan(1, 1), {}, 1.0).empty());
}

TEST(AdmissionDecisionTest, CheckScopesReportsTheBindingLimitPerScope) {
  const std::vector<MemoryLimit> limits = {
      Measured(LimitScope::kHost, 20 * kGiB, "meminfo"),
      Measured(LimitScope::kHost, 10 * kGiB, "cgroup"), Explicit(5 * kGiB)};
  const std::vector<ScopeCheck> checks =
      CheckScopes(HostPlan(3 * kGiB, 1 * kGiB), limits, 1.0);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].scope, LimitScope::kHost);
  EXPECT_EQ(checks[0].usable_bytes, 10 * kGiB - 512 * kMiB);
  EXPECT_TRUE(absl::StartsWith(checks[0].limited_by, "cgroup"));
  EXPECT_EQ(checks[1].scope, LimitScope::kTotal);
  EXPECT_EQ(checks[1].needed_bytes, 4 * kGiB);
  EXPECT_TRUE(checks[1].fits());
}

}  // namespace
}  // namespace shardd::core
