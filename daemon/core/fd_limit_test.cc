#include "daemon/core/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

constexpr uint64_t kUnlimited = static_cast<uint64_t>(RLIM_INFINITY);

TEST(FdLimitTest, RaisedSoftIsTheHardLimitAndNeverLower) {
  EXPECT_EQ(FdLimit::RaisedSoft(1024, 524288), 524288u);
  EXPECT_EQ(FdLimit::RaisedSoft(1048576, 1048576), 1048576u);
  EXPECT_EQ(FdLimit::RaisedSoft(1024, kUnlimited), kUnlimited);
  // A soft limit above the hard one cannot be; it is left alone anyway.
  EXPECT_EQ(FdLimit::RaisedSoft(4096, 1024), 4096u);
}

TEST(FdLimitTest, StartupMessageSaysWhatChangedOrWhatFailed) {
  EXPECT_EQ(FdLimit::StartupMessage("coordinator",
                                    FdLimit::Result{1024, 524288, 524288}),
            "coordinator: open-file limit 1024 -> 524288 (hard 524288)");
  EXPECT_EQ(FdLimit::StartupMessage(
                "shardd", FdLimit::Result{kUnlimited, kUnlimited, kUnlimited}),
            "");
  const std::string failed = FdLimit::StartupMessage(
      "shardd", absl::PermissionDeniedError("setrlimit(RLIMIT_NOFILE)"));
  EXPECT_NE(failed.find("shardd: PERMISSION_DENIED"), std::string::npos)
      << failed;
  EXPECT_NE(failed.find("going on with the limit as it is"), std::string::npos)
      << failed;
}

// The real call on this process: lowered first (always allowed), then
// raised back to the hard limit.
TEST(FdLimitTest, RaiseSoftToHardRaisesThisProcessLimit) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max < 2) GTEST_FAIL() << "hard limit " << before.rlim_max;
  rlimit lowered = before;
  lowered.rlim_cur = before.rlim_max == RLIM_INFINITY
                         ? 1024
                         : std::min<rlim_t>(before.rlim_max - 1, 1024);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);

  absl::StatusOr<FdLimit::Result> result = FdLimit::RaiseSoftToHard();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->soft_before, lowered.rlim_cur);
  EXPECT_EQ(result->soft_after, before.rlim_max);
  EXPECT_EQ(result->hard, before.rlim_max);
  rlimit after{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(after.rlim_cur, before.rlim_max);
  EXPECT_EQ(after.rlim_max, before.rlim_max);
  EXPECT_NE(FdLimit::Describe(*result).find("open-file limit "),
            std::string::npos);

  // Raised already: nothing to do, nothing changes.
  result = FdLimit::RaiseSoftToHard();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->soft_before, result->soft_after);
}

}  // namespace
}  // namespace shardd::core
