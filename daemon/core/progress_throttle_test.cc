#include "daemon/core/progress_throttle.h"

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd {
namespace {

const MonoTime kT0 = MonoTime::FromOrigin(absl::Seconds(100));

TEST(ProgressThrottleTest, TheFirstReadingIsReportedAtOnce) {
  ProgressThrottle throttle(1600);
  EXPECT_TRUE(throttle.ShouldReport(0, kT0));
  EXPECT_EQ(throttle.reports(), 1);
  // Nothing new since: not again, however late.
  EXPECT_FALSE(throttle.ShouldReport(0, kT0 + absl::Hours(1)));
}

TEST(ProgressThrottleTest,
     ANewReportNeedsASixteenthOfTheTotalAndAQuarterSecond) {
  ProgressThrottle throttle(1600);
  EXPECT_EQ(throttle.step_bytes(), 100);
  ASSERT_TRUE(throttle.ShouldReport(0, kT0));
  // Enough bytes, too soon.
  EXPECT_FALSE(throttle.ShouldReport(800, kT0 + absl::Milliseconds(249)));
  // Long enough, too few bytes since the last report (0).
  EXPECT_FALSE(throttle.ShouldReport(99, kT0 + absl::Seconds(10)));
  // Both.
  EXPECT_TRUE(throttle.ShouldReport(100, kT0 + absl::Milliseconds(250)));
  // Counted from that report, not from the readings refused in between.
  EXPECT_FALSE(throttle.ShouldReport(199, kT0 + absl::Seconds(20)));
  EXPECT_FALSE(throttle.ShouldReport(1600, kT0 + absl::Milliseconds(499)));
  EXPECT_TRUE(throttle.ShouldReport(1600, kT0 + absl::Milliseconds(500)));
  EXPECT_EQ(throttle.reports(), 3);
}

TEST(ProgressThrottleTest, TinyChunksOverALongCopyGiveAtMostSeventeenReports) {
  // 1 MiB in 1-byte readings, one per second: time never holds a report
  // back, the bytes do.
  constexpr int64_t kTotal = 1 << 20;
  ProgressThrottle throttle(kTotal);
  std::vector<int64_t> reported;
  MonoTime now = kT0;
  for (int64_t done = 0; done <= kTotal; ++done, now += absl::Seconds(1)) {
    if (throttle.ShouldReport(done, now)) reported.push_back(done);
  }
  ASSERT_EQ(reported.size(), 17u);
  EXPECT_EQ(reported.front(), 0);
  EXPECT_EQ(reported.back(), kTotal);
  for (size_t i = 1; i < reported.size(); ++i) {
    EXPECT_EQ(reported[i] - reported[i - 1], kTotal / 16) << i;
  }
}

TEST(ProgressThrottleTest, AFastCopyIsReportedAtMostFourTimesASecond) {
  // 16 GiB at 64 MiB per millisecond (256 ms in all): a sixteenth arrives
  // every 16 ms, so the clock is what holds reports back.
  constexpr int64_t kTotal = int64_t{16} << 30;
  constexpr int64_t kReading = int64_t{64} << 20;
  ProgressThrottle throttle(kTotal);
  std::vector<absl::Duration> when;
  MonoTime now = kT0;
  for (int64_t done = 0; done <= kTotal;
       done += kReading, now += absl::Milliseconds(1)) {
    if (throttle.ShouldReport(done, now)) when.push_back(now - kT0);
  }
  EXPECT_EQ(when, (std::vector<absl::Duration>{absl::ZeroDuration(),
                                               absl::Milliseconds(250)}));
}

TEST(ProgressThrottleTest, ReportedCountsOnlyIncrease) {
  ProgressThrottle throttle(
      1000, {.min_interval = absl::ZeroDuration(), .max_reports = 1000});
  ASSERT_TRUE(throttle.ShouldReport(500, kT0));
  EXPECT_FALSE(throttle.ShouldReport(400, kT0 + absl::Seconds(1)));
  EXPECT_FALSE(throttle.ShouldReport(500, kT0 + absl::Seconds(1)));
  EXPECT_TRUE(throttle.ShouldReport(501, kT0 + absl::Seconds(1)));
}

TEST(ProgressThrottleTest, ReadingsOutsideTheTotalAreNeverReported) {
  ProgressThrottle throttle(100);
  EXPECT_FALSE(throttle.ShouldReport(-1, kT0));
  EXPECT_FALSE(throttle.ShouldReport(101, kT0));
  EXPECT_EQ(throttle.reports(), 0);
  EXPECT_TRUE(throttle.ShouldReport(100, kT0));
}

TEST(ProgressThrottleTest, AnEmptyTransferIsReportedOnceAtZero) {
  ProgressThrottle throttle(0);
  EXPECT_EQ(throttle.step_bytes(), 1);
  EXPECT_TRUE(throttle.ShouldReport(0, kT0));
  EXPECT_FALSE(throttle.ShouldReport(0, kT0 + absl::Seconds(1)));
  ProgressThrottle negative(-5);
  EXPECT_EQ(negative.total_bytes(), 0);
  EXPECT_TRUE(negative.ShouldReport(0, kT0));
}

TEST(ProgressThrottleTest, ASmallTotalStillStepsByAtLeastOneByte) {
  ProgressThrottle throttle(
      3, {.min_interval = absl::ZeroDuration(), .max_reports = 16});
  EXPECT_EQ(throttle.step_bytes(), 1);
  int reports = 0;
  for (int64_t done = 0; done <= 3; ++done) {
    reports += throttle.ShouldReport(done, kT0) ? 1 : 0;
  }
  EXPECT_EQ(reports, 4);
}

TEST(ProgressThrottleTest, NonsenseOptionsAreClamped) {
  ProgressThrottle throttle(
      100, {.min_interval = absl::Seconds(-1), .max_reports = 0});
  EXPECT_EQ(throttle.step_bytes(), 100);
  EXPECT_TRUE(throttle.ShouldReport(0, kT0));
  EXPECT_FALSE(throttle.ShouldReport(99, kT0));
  EXPECT_TRUE(throttle.ShouldReport(100, kT0));
}

}  // namespace
}  // namespace shardd
