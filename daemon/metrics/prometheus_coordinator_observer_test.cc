#include "daemon/metrics/prometheus_coordinator_observer.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/promtool.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace shardd::metrics {
namespace {

namespace labels = coordinator_labels;

class PrometheusCoordinatorObserverTest : public ::testing::Test {
 protected:
  std::string Exposition() {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  }

  std::map<std::string, double> Samples() {
    const std::string text = Exposition();
    auto samples = ParseExposition(text);
    EXPECT_TRUE(samples.ok()) << samples.status() << "\n" << text;
    return samples.ok() ? *samples : std::map<std::string, double>{};
  }

  prometheus::Registry registry_;
  PrometheusCoordinatorObserver observer_{registry_};
};

TEST_F(PrometheusCoordinatorObserverTest,
       ExportsEverySeriesAtZeroBeforeAnyEvent) {
  auto s = Samples();
  for (const char* cause :
       {"lease_expired", "collective_failed", "collective_timeout",
        "peer_unreachable", "transfer_failed", "process_exited"}) {
    EXPECT_EQ(
        s.at(absl::StrCat("shardd_coordinator_failures_detected_total{cause=\"",
                          cause, "\"}")),
        0)
        << cause;
  }
  for (const char* result : {"removed", "dismissed", "stale"}) {
    EXPECT_EQ(
        s.at(absl::StrCat("shardd_coordinator_failure_reports_total{result=\"",
                          result, "\"}")),
        0);
  }
  EXPECT_EQ(s.at("shardd_coordinator_recovery_seconds_count"), 0);
  EXPECT_EQ(s.count("shardd_coordinator_recovery_duration_seconds_count{"
                    "phase=\"total\"}"),
            0u)
      << "the whole recovery is not a phase (sum over phases would count it "
         "twice)";
  for (const char* phase :
       {"detection", "awaiting_replacement", "transfer", "rendezvous"}) {
    EXPECT_EQ(s.at(absl::StrCat(
                  "shardd_coordinator_recovery_duration_seconds_count{phase=\"",
                  phase, "\"}")),
              0);
  }
  for (const char* decision : {"commit", "reject", "aborted"}) {
    EXPECT_EQ(
        s.at(absl::StrCat("shardd_coordinator_commit_votes_total{decision=\"",
                          decision, "\"}")),
        0);
  }
  for (const char* name :
       {"shardd_coordinator_membership_epoch", "shardd_coordinator_ready",
        "shardd_coordinator_members_live",
        "shardd_coordinator_members_expected",
        "shardd_coordinator_committed_step",
        "shardd_coordinator_recoveries_started_total",
        "shardd_coordinator_recoveries_completed_total",
        "shardd_coordinator_shards_without_replica",
        "shardd_coordinator_broken_peer_links",
        "shardd_coordinator_checkpoint_fallbacks_total",
        "shardd_coordinator_lease_seconds", "shardd_coordinator_job_failed"}) {
    EXPECT_EQ(s.at(name), 0) << name;
  }
  EXPECT_FALSE(absl::StrContains(Exposition(), "other"));
}

TEST_F(PrometheusCoordinatorObserverTest, GaugesFollowTheLatestValues) {
  observer_.EpochChanged(3, false);
  observer_.Members(3, 4);
  observer_.CommittedStep(41);
  observer_.Lease(absl::Milliseconds(1500));
  observer_.ShardsWithoutReplica(2);
  observer_.BrokenPeerLinks(3);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_coordinator_membership_epoch"), 3);
  EXPECT_EQ(s.at("shardd_coordinator_ready"), 0);
  EXPECT_EQ(s.at("shardd_coordinator_members_live"), 3);
  EXPECT_EQ(s.at("shardd_coordinator_members_expected"), 4);
  EXPECT_EQ(s.at("shardd_coordinator_committed_step"), 41);
  EXPECT_EQ(s.at("shardd_coordinator_lease_seconds"), 1.5);
  EXPECT_EQ(s.at("shardd_coordinator_shards_without_replica"), 2);
  EXPECT_EQ(s.at("shardd_coordinator_broken_peer_links"), 3);
  observer_.BrokenPeerLinks(0);
  EXPECT_EQ(Samples().at("shardd_coordinator_broken_peer_links"), 0);
  observer_.EpochChanged(4, true);
  observer_.Members(4, 4);
  observer_.ShardsWithoutReplica(0);
  s = Samples();
  EXPECT_EQ(s.at("shardd_coordinator_membership_epoch"), 4);
  EXPECT_EQ(s.at("shardd_coordinator_ready"), 1);
  EXPECT_EQ(s.at("shardd_coordinator_members_live"), 4);
  EXPECT_EQ(s.at("shardd_coordinator_shards_without_replica"), 0);
}

TEST_F(PrometheusCoordinatorObserverTest,
       JobFailedIsZeroUntilTheJobFailsThenOneWithoutTheReason) {
  EXPECT_EQ(Samples().at("shardd_coordinator_job_failed"), 0);
  observer_.JobFailed(true,
                      "DATA_LOSS: shard 2 has no live holder and no "
                      "checkpoint holds it");
  EXPECT_EQ(Samples().at("shardd_coordinator_job_failed"), 1);
  EXPECT_FALSE(absl::StrContains(Exposition(), "DATA_LOSS"))
      << "the reason is not a label";
  // Other events after the failure leave it set.
  observer_.EpochChanged(7, false);
  observer_.Members(3, 4);
  EXPECT_EQ(Samples().at("shardd_coordinator_job_failed"), 1);
}

TEST_F(PrometheusCoordinatorObserverTest,
       FailuresAndReportsCountByCauseAndResultUnknownAsOther) {
  observer_.MemberFailed(labels::kLeaseExpired);
  observer_.MemberFailed(labels::kCollectiveTimeout);
  observer_.MemberFailed(labels::kCollectiveTimeout);
  observer_.MemberFailed("FAILURE_KIND_SOMETHING_NEW");
  observer_.FailureReport(labels::kRemoved);
  observer_.FailureReport(labels::kStale);
  observer_.FailureReport(labels::kStale);
  observer_.FailureReport("bogus");
  auto s = Samples();
  const std::string f = "shardd_coordinator_failures_detected_total";
  EXPECT_EQ(s.at(f + "{cause=\"lease_expired\"}"), 1);
  EXPECT_EQ(s.at(f + "{cause=\"collective_timeout\"}"), 2);
  EXPECT_EQ(s.at(f + "{cause=\"collective_failed\"}"), 0);
  EXPECT_EQ(s.at(f + "{cause=\"other\"}"), 1);
  const std::string r = "shardd_coordinator_failure_reports_total";
  EXPECT_EQ(s.at(r + "{result=\"removed\"}"), 1);
  EXPECT_EQ(s.at(r + "{result=\"dismissed\"}"), 0);
  EXPECT_EQ(s.at(r + "{result=\"stale\"}"), 2);
  EXPECT_EQ(s.at(r + "{result=\"other\"}"), 1);
  EXPECT_FALSE(absl::StrContains(Exposition(), "SOMETHING_NEW"));
}

TEST_F(PrometheusCoordinatorObserverTest,
       RecoveryCountsAndPhaseDurationsInSeconds) {
  observer_.RecoveryStarted();
  observer_.RecoveryStarted();
  observer_.RecoveryCompleted();
  observer_.CheckpointFallback();
  observer_.LeaseExpiryDeferred();
  observer_.CoordinatorStalled();
  observer_.CoordinatorStalled();
  observer_.RecoveryPhase(labels::kDetection, absl::Milliseconds(1700));
  observer_.RecoveryPhase(labels::kTransfer, absl::Milliseconds(200));
  observer_.RecoveryPhase(labels::kTotal, absl::Seconds(700));
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_coordinator_recoveries_started_total"), 2);
  EXPECT_EQ(s.at("shardd_coordinator_recoveries_completed_total"), 1);
  EXPECT_EQ(s.at("shardd_coordinator_checkpoint_fallbacks_total"), 1);
  EXPECT_EQ(s.at("shardd_coordinator_lease_expiry_deferrals_total"), 1);
  EXPECT_EQ(s.at("shardd_coordinator_stalls_total"), 2);
  const std::string h = "shardd_coordinator_recovery_duration_seconds";
  EXPECT_EQ(s.at(h + "_count{phase=\"detection\"}"), 1);
  EXPECT_DOUBLE_EQ(s.at(h + "_sum{phase=\"detection\"}"), 1.7);
  EXPECT_EQ(s.at(h + "_bucket{le=\"1\",phase=\"detection\"}"), 0);
  EXPECT_EQ(s.at(h + "_bucket{le=\"2.5\",phase=\"detection\"}"), 1);
  EXPECT_EQ(s.at(h + "_bucket{le=\"0.1\",phase=\"transfer\"}"), 0);
  EXPECT_EQ(s.at(h + "_bucket{le=\"0.25\",phase=\"transfer\"}"), 1);
  EXPECT_EQ(s.at("shardd_coordinator_recovery_seconds_bucket{le=\"600\"}"), 0)
      << "700 s is past the largest bucket";
  EXPECT_EQ(s.at("shardd_coordinator_recovery_seconds_bucket{le=\"+Inf\"}"), 1);
  EXPECT_EQ(s.at(h + "_count{phase=\"rendezvous\"}"), 0);
}

TEST(PrometheusCoordinatorObserverClockTest,
     LastStepTimeIsTheStartThenEachAdvanceOfTheStep) {
  prometheus::Registry registry;
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  PrometheusCoordinatorObserver observer(registry, [&now] { return now; });
  const auto sample = [&registry](const std::string& name) {
    auto s = ParseExposition(
        prometheus::TextSerializer().Serialize(registry.Collect()));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() && s->count(name) ? s->at(name) : -1.0;
  };
  const std::string last = "shardd_coordinator_last_step_timestamp_seconds";
  EXPECT_EQ(sample(last), 1'700'000'000) << "the start, before any step";
  EXPECT_EQ(sample("shardd_coordinator_stall_alert_after_seconds"), 0);
  now += absl::Seconds(30);
  observer.CommittedStep(1);
  EXPECT_EQ(sample(last), 1'700'000'030);
  now += absl::Seconds(30);
  observer.CommittedStep(1);  // The same step again: no progress.
  observer.CommittedStep(0);  // Back: no progress either.
  EXPECT_EQ(sample(last), 1'700'000'030);
  EXPECT_EQ(sample("shardd_coordinator_committed_step"), 0);
  now += absl::Seconds(5);
  observer.CommittedStep(2);
  EXPECT_EQ(sample(last), 1'700'000'065);
  observer.StallAlertAfter(absl::Minutes(15));
  EXPECT_EQ(sample("shardd_coordinator_stall_alert_after_seconds"), 900);
  observer.StallAlertAfter(-absl::Seconds(1));
  EXPECT_EQ(sample("shardd_coordinator_stall_alert_after_seconds"), 0);
}

TEST_F(PrometheusCoordinatorObserverTest, CommitVotesCountByDecision) {
  observer_.CommitVote(labels::kCommit);
  observer_.CommitVote(labels::kCommit);
  observer_.CommitVote(labels::kReject);
  observer_.CommitVote(labels::kAborted);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_coordinator_commit_votes_total{decision=\"commit\"}"),
            2);
  EXPECT_EQ(s.at("shardd_coordinator_commit_votes_total{decision=\"reject\"}"),
            1);
  EXPECT_EQ(s.at("shardd_coordinator_commit_votes_total{decision=\"aborted\"}"),
            1);
}

TEST_F(PrometheusCoordinatorObserverTest, ConcurrentEventsAreAllCounted) {
  constexpr int kThreads = 4;
  constexpr int kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        observer_.MemberFailed(labels::kPeerUnreachable);
        observer_.MemberFailed("weird");
        observer_.RecoveryPhase(labels::kRendezvous, absl::Milliseconds(10));
      }
    });
  }
  for (auto& t : threads) t.join();
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_coordinator_failures_detected_total{cause=\"peer_"
                 "unreachable\"}"),
            kThreads * kEach);
  EXPECT_EQ(s.at("shardd_coordinator_failures_detected_total{cause=\"other\"}"),
            kThreads * kEach);
  EXPECT_EQ(s.at("shardd_coordinator_recovery_duration_seconds_count{phase="
                 "\"rendezvous\"}"),
            kThreads * kEach);
}

TEST_F(PrometheusCoordinatorObserverTest,
       PromtoolAcceptsTheExpositionAfterEvents) {
  ASSERT_TRUE(PromtoolCheckMetrics(Exposition()).ok())
      << PromtoolCheckMetrics(Exposition());
  observer_.EpochChanged(2, true);
  observer_.Members(4, 4);
  observer_.CommittedStep(10);
  observer_.MemberFailed("unknown cause");
  observer_.FailureReport(labels::kDismissed);
  observer_.RecoveryStarted();
  observer_.RecoveryCompleted();
  observer_.RecoveryPhase("unknown phase", absl::Seconds(1));
  observer_.ShardsWithoutReplica(1);
  observer_.CheckpointFallback();
  observer_.LeaseExpiryDeferred();
  observer_.CommitVote(labels::kReject);
  observer_.Lease(absl::Seconds(2));
  observer_.JobFailed(true, "EPOCH_STALLED: \"quoted\"\nreason");
  const std::string text = Exposition();
  const absl::Status check = PromtoolCheckMetrics(text);
  EXPECT_TRUE(check.ok()) << check << "\n" << text;
}

}  // namespace
}  // namespace shardd::metrics
