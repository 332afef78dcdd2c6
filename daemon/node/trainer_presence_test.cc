#include "daemon/node/trainer_presence.h"

#include "daemon/core/manual_clock.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

TEST(TrainerPresenceTest, NoTrainerUntilOneRegisters) {
  ManualClock clock;
  TrainerPresence presence(&clock);
  // A call without a registration (refused by the daemon) attaches nothing.
  presence.Called();
  clock.Advance(absl::Seconds(5));
  const v1::TrainerPresence report = presence.Report();
  EXPECT_FALSE(report.attached());
  EXPECT_EQ(report.quiet_ms(), 0);
}

TEST(TrainerPresenceTest, QuietTimeRunsFromTheLastCall) {
  ManualClock clock;
  TrainerPresence presence(&clock);
  presence.Registered();
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(presence.Report().quiet_ms(), 1500);  // Since the registration.
  presence.Called();
  clock.Advance(absl::Milliseconds(250));
  v1::TrainerPresence report = presence.Report();
  EXPECT_TRUE(report.attached());
  EXPECT_EQ(report.quiet_ms(), 250);
  // A trainer that exits: the time keeps growing, the trainer stays
  // attached (a restarted one re-registers).
  clock.Advance(absl::Seconds(30));
  report = presence.Report();
  EXPECT_TRUE(report.attached());
  EXPECT_EQ(report.quiet_ms(), 30250);
  presence.Registered();
  EXPECT_EQ(presence.Report().quiet_ms(), 0);
}

TEST(TrainerPresenceTest, AWallClockStepChangesNothing) {
  ManualClock clock;
  TrainerPresence presence(&clock);
  presence.Registered();
  clock.StepWall(absl::Hours(-1));
  clock.Advance(absl::Milliseconds(10));
  EXPECT_EQ(presence.Report().quiet_ms(), 10);
}

}  // namespace
}  // namespace shardd::node
