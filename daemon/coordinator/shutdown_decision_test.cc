#include "daemon/coordinator/shutdown_decision.h"

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

class ShutdownDecisionTest : public ::testing::Test {
 protected:
  ShutdownDecisionTest() {
    options_.failed_drain = absl::Seconds(30);
    options_.failed_report_wait = absl::Seconds(60);
    options_.metrics_served = true;
  }

  // The job failed at t0 and it is now t0 + `since`.
  ShutdownInput FailedFor(absl::Duration since) const {
    ShutdownInput in;
    in.failed = true;
    in.failed_at = t0_;
    in.now = t0_ + since;
    return in;
  }

  const MonoTime t0_ = MonoTime::FromOrigin(absl::Seconds(1000));
  ShutdownOptions options_;
};

TEST_F(ShutdownDecisionTest, RunsOnWhileTheJobHasNotFailed) {
  ShutdownInput in;
  in.now = t0_;
  in.drained = true;  // Before anyone joined.
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_FALSE(d.exit);
  EXPECT_FALSE(d.awaiting_scrape);
}

TEST_F(ShutdownDecisionTest, ASignalBeforeTheFailureExitsAtOnceWithStatus0) {
  ShutdownInput in;
  in.now = t0_;
  in.signals = 1;
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 0);
  EXPECT_EQ(d.leave, "signal received");
}

TEST_F(ShutdownDecisionTest, ServesOnWhileMembersDrainWithinTheDrainTime) {
  const ShutdownDecision d =
      DecideShutdown(options_, FailedFor(absl::Seconds(5)));
  EXPECT_FALSE(d.exit);
  EXPECT_FALSE(d.awaiting_scrape);
  EXPECT_TRUE(d.leave.empty()) << d.leave;
}

TEST_F(ShutdownDecisionTest,
       HoldsTheExitOnceDrainedUntilAScrapeAfterTheFailure) {
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.drained = true;
  ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_FALSE(d.exit);
  EXPECT_TRUE(d.awaiting_scrape);
  EXPECT_EQ(d.leave, "every member has left");
  EXPECT_EQ(d.report_deadline, t0_ + absl::Seconds(60));

  in.now = t0_ + absl::Seconds(3);
  in.last_scrape = t0_ + absl::Milliseconds(2500);
  d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
  EXPECT_EQ(d.leave, "every member has left");
  EXPECT_EQ(d.report, "/metrics was served 2.5s after the failure");
}

TEST_F(ShutdownDecisionTest, AScrapeFromBeforeTheFailureDoesNotCount) {
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.drained = true;
  in.last_scrape = t0_ - absl::Milliseconds(1);
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_FALSE(d.exit);
  EXPECT_TRUE(d.awaiting_scrape);
}

TEST_F(ShutdownDecisionTest, AScrapeBeforeTheDrainLetsItExitAsSoonAsDrained) {
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.last_scrape = t0_;  // Scraped while members still drained.
  EXPECT_FALSE(DecideShutdown(options_, in).exit);
  in.drained = true;
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
  EXPECT_EQ(d.report, "/metrics was served 0 after the failure");
}

TEST_F(ShutdownDecisionTest, GivesUpOnTheScrapeAtTheBoundFromTheFailure) {
  ShutdownInput in = FailedFor(absl::Seconds(59));
  in.drained = true;
  EXPECT_FALSE(DecideShutdown(options_, in).exit);
  in.now = t0_ + absl::Seconds(60);
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
  EXPECT_TRUE(absl::StrContains(
      d.report, "no /metrics scrape within --failed_report_wait=1m"))
      << d.report;
}

TEST_F(ShutdownDecisionTest, TheDrainTimeEndsTheDrainButNotTheReportWait) {
  ShutdownInput in = FailedFor(absl::Seconds(30));  // A member never left.
  ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_FALSE(d.exit);
  EXPECT_TRUE(d.awaiting_scrape);
  EXPECT_EQ(d.leave, "drain time is up");
  EXPECT_EQ(d.report_deadline, t0_ + absl::Seconds(60));
}

TEST_F(ShutdownDecisionTest,
       AReportWaitShorterThanTheDrainHoldsNothingAfterIt) {
  options_.failed_report_wait = absl::Seconds(10);
  const ShutdownDecision d =
      DecideShutdown(options_, FailedFor(absl::Seconds(30)));
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.leave, "drain time is up");
  EXPECT_TRUE(absl::StrContains(d.report, "no /metrics scrape")) << d.report;
}

TEST_F(ShutdownDecisionTest, ASignalAfterTheFailureStillWaitsForTheScrape) {
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.signals = 1;  // Kubernetes deletes the failed JobSet's pods.
  ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_FALSE(d.exit);
  EXPECT_TRUE(d.awaiting_scrape);
  EXPECT_EQ(d.leave, "signal received");
  in.last_scrape = in.now;
  d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
}

TEST_F(ShutdownDecisionTest, ASecondSignalExitsAtOnceWithStatus3) {
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.signals = 2;
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
  EXPECT_EQ(d.leave, "second signal received");
  EXPECT_EQ(d.report, "/metrics not scraped since the failure");
}

TEST_F(ShutdownDecisionTest, WithoutMetricsItExitsOnceDrainedAsBefore) {
  options_.metrics_served = false;
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.drained = true;
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
  EXPECT_FALSE(d.awaiting_scrape);
  EXPECT_TRUE(d.report.empty()) << d.report;
}

TEST_F(ShutdownDecisionTest, AZeroReportWaitExitsOnceDrainedAsBefore) {
  options_.failed_report_wait = absl::ZeroDuration();
  ShutdownInput in = FailedFor(absl::Seconds(1));
  in.drained = true;
  const ShutdownDecision d = DecideShutdown(options_, in);
  EXPECT_TRUE(d.exit);
  EXPECT_EQ(d.exit_status, 3);
  EXPECT_TRUE(d.report.empty()) << d.report;
}

}  // namespace
}  // namespace shardd::coordinator
