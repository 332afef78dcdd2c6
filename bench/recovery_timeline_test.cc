#include "bench/recovery_timeline.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardd::bench {
namespace {

class RecoveryTimelineTest : public ::testing::Test {
 protected:
  // t0 + ms, on a whole second so that the log's truncation is exact.
  static absl::Time At(double ms) {
    return absl::FromUnixSeconds(1'800'000'000) + absl::Milliseconds(ms);
  }

  static CoordinatorDecision Decision(double ms, int64_t epoch,
                                      std::string kind, std::string reason) {
    return {At(ms), epoch, std::move(kind), std::move(reason)};
  }

  // A failure of rank 1 killed at 1000 ms: detected by a survivor at 1010,
  // the replacement joins at 1150, ready at 2650 (transfer 1.2 s, its
  // stream 0.4 s), trainers step at 500 ms intervals before and resume at
  // 3100..3120.
  static RecoveryObservations Observations() {
    RecoveryObservations obs;
    obs.kill = At(1000);
    obs.killed_rank = 1;
    obs.world_size = 2;
    obs.recovered = {1, 1, 2, 3, 1000, 1.2};
    obs.engine_ready_line = At(1950);
    obs.recovered_line = At(2350);
    obs.decisions = {
        Decision(0, 4, "EPOCH_READY", "epoch 4 ready"),
        Decision(1010, 4, "FAILURE_REPORT_DISMISSED", "rank 0 reported ..."),
        Decision(1010, 5, "EPOCH_STARTED",
                 "epoch 5: rank 0 reported its communicators broken"),
        Decision(1150, 5, "MEMBER_REMOVED",
                 "rank 1 'node-1' replaced by a new incarnation"),
        Decision(1150, 5, "MEMBER_JOINED", "rank 1 joined: 'node-1' at x"),
        Decision(1150, 6, "EPOCH_STARTED", "epoch 6: rank 1 joined"),
        Decision(1150, 6, "RECOVERY_PLANNED", "rank 1 copies shard 1"),
        Decision(2650, 6, "EPOCH_READY", "epoch 6 ready"),
    };
    obs.trainer_lines = {
        {At(0), "trainer-0", "step 1 loss 1 grad_norm 1"},
        {At(500), "trainer-0", "step 2 loss 1 grad_norm 1"},
        {At(10), "trainer-1", "step 1 loss 1 grad_norm 1"},
        {At(510), "trainer-1", "step 2 loss 1 grad_norm 1"},
        {At(1020), "trainer-0", "step 3 aborted (peer died); waiting"},
        {At(3100), "trainer-0", "step 3 loss 1 grad_norm 1"},
        {At(3120), "trainer-1", "step 3 loss 1 grad_norm 1"},
        {At(3600), "trainer-0", "step 4 loss 1 grad_norm 1"},
    };
    return obs;
  }
};

TEST_F(RecoveryTimelineTest, ParsesCoordinatorDecision) {
  std::optional<CoordinatorDecision> d = ParseCoordinatorDecision(
      "2026-12-02T17:49:27.549Z coordinator: epoch 6 RECOVERY_PLANNED: rank 1 "
      "copies shard 1 at step 2 from rank(s) 3");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->epoch, 6);
  EXPECT_EQ(d->kind, "RECOVERY_PLANNED");
  EXPECT_EQ(d->reason, "rank 1 copies shard 1 at step 2 from rank(s) 3");
  EXPECT_EQ(absl::FormatTime("%H:%M:%E3S", d->time, absl::UTCTimeZone()),
            "17:49:27.549");
}

TEST_F(RecoveryTimelineTest, IgnoresOtherCoordinatorLines) {
  EXPECT_FALSE(ParseCoordinatorDecision("coordinator: signal 15, shutting down")
                   .has_value());
  EXPECT_FALSE(ParseCoordinatorDecision(
                   "2026-12-02T17:49:27.549Z coordinator: metrics on x:1")
                   .has_value());
  EXPECT_FALSE(ParseCoordinatorDecision("").has_value());
}

TEST_F(RecoveryTimelineTest, ParsesRecoveredLine) {
  absl::StatusOr<RecoveredLine> r = ParseRecoveredLine(
      "shardd rank 1 recovered shard 1 at step 2 from rank 3: 302137344 bytes "
      "in 4.641 s (65.1 MB/s)");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->shard, 1);
  EXPECT_EQ(r->step, 2);
  EXPECT_EQ(r->source, 3);
  EXPECT_EQ(r->bytes, 302137344);
  EXPECT_DOUBLE_EQ(r->seconds, 4.641);
}

TEST_F(RecoveryTimelineTest, RejectsMalformedRecoveredLine) {
  absl::StatusOr<RecoveredLine> r =
      ParseRecoveredLine("shardd rank 1 recovered shard 1 at step two");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("step two"), std::string::npos);
}

TEST_F(RecoveryTimelineTest, CommittedStepSkipsAbortedAndOtherLines) {
  EXPECT_EQ(ParseCommittedStep("step 12 loss 0.5 grad_norm 1"), 12);
  EXPECT_FALSE(ParseCommittedStep("step 3 aborted (x); waiting").has_value());
  EXPECT_FALSE(
      ParseCommittedStep("re-attached: epoch 6, committed step 2").has_value());
}

TEST_F(RecoveryTimelineTest, SplitsPhasesThatAddUpToTheTotal) {
  absl::StatusOr<RecoveryPhases> p = ComputeRecoveryPhases(Observations());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->detection_s, 0.010, 1e-9);
  EXPECT_NEAR(p->join_wait_s, 0.140, 1e-9);
  EXPECT_NEAR(p->transfer_s, 1.2, 1e-9);
  EXPECT_NEAR(p->rendezvous_s, 1.5 - 1.2, 1e-9);
  EXPECT_NEAR(p->stream_s, 0.4, 1e-9);
  EXPECT_NEAR(p->engine_s, 0.8, 1e-9);
  // The last trainer's first new step: trainer-1 at 3120.
  EXPECT_NEAR(p->first_step_s, 0.470, 1e-9);
  EXPECT_NEAR(p->total_s, 2.120, 1e-9);
  EXPECT_NEAR(p->detection_s + p->join_wait_s + p->rendezvous_s +
                  p->transfer_s + p->first_step_s,
              p->total_s, 1e-9);
  EXPECT_EQ(p->detected_by, "survivor report");
  // trainer-0: 500 ms before the failure and 500 ms after it.
  EXPECT_NEAR(p->step_s, 0.5, 1e-9);
}

TEST_F(RecoveryTimelineTest, CountsDecisionsInTheKillsMillisecond) {
  RecoveryObservations obs = Observations();
  // The detection came within the kill's millisecond: logged as 1009.
  obs.kill = At(1009.6);
  obs.decisions[2].time = At(1009);
  absl::StatusOr<RecoveryPhases> p = ComputeRecoveryPhases(obs);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->detection_s, -0.0006, 1e-9);
}

TEST_F(RecoveryTimelineTest, DetectionByTheReplacementsJoin) {
  RecoveryObservations obs = Observations();
  obs.decisions.erase(obs.decisions.begin() + 1, obs.decisions.begin() + 3);
  absl::StatusOr<RecoveryPhases> p = ComputeRecoveryPhases(obs);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->detected_by, "replacement join");
  EXPECT_NEAR(p->detection_s, 0.150, 1e-9);
  EXPECT_NEAR(p->join_wait_s, 0.0, 1e-9);
}

TEST_F(RecoveryTimelineTest, IgnoresDecisionsBeforeTheKill) {
  RecoveryObservations obs = Observations();
  obs.kill = At(2000);  // After the detection and the join.
  absl::StatusOr<RecoveryPhases> p = ComputeRecoveryPhases(obs);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RecoveryTimelineTest, FailsWithoutTheReplacementsJoin) {
  RecoveryObservations obs = Observations();
  obs.killed_rank = 2;  // Rank 2 never joins again.
  absl::StatusOr<RecoveryPhases> p = ComputeRecoveryPhases(obs);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("rank 2"), std::string::npos);
}

TEST_F(RecoveryTimelineTest, FailsWhenATrainerDidNotResume) {
  RecoveryObservations obs = Observations();
  obs.trainer_lines.erase(obs.trainer_lines.begin() + 6);  // trainer-1's 3
  absl::StatusOr<RecoveryPhases> p = ComputeRecoveryPhases(obs);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("trainer-1"), std::string::npos);
}

}  // namespace
}  // namespace shardd::bench
