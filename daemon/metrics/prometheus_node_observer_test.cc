#include "daemon/metrics/prometheus_node_observer.h"

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

class PrometheusNodeObserverTest : public ::testing::Test {
 protected:
  // What a scrape of the registry returns.
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
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  PrometheusNodeObserver observer_{registry_, "1.2.3"};
};

TEST_F(PrometheusNodeObserverTest, ExportsEverySeriesAtZeroBeforeAnyEvent) {
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_steps_committed_total"), 0);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_count"), 0);
  for (const char* op :
       {"all_gather", "reduce_scatter", "all_reduce", "broadcast"}) {
    for (const char* group : {"shard", "replica"}) {
      const std::string labels =
          absl::StrCat("{group=\"", group, "\",op=\"", op, "\"}");
      EXPECT_EQ(s.at("shardd_collective_bytes_total" + labels), 0) << labels;
      EXPECT_EQ(s.at("shardd_collective_failures_total" + labels), 0);
      EXPECT_EQ(s.at("shardd_collective_duration_seconds_count" + labels), 0);
    }
  }
  for (const char* reason :
       {"peer_failure", "vote_rejected", "epoch_changed", "internal_error"}) {
    EXPECT_EQ(s.at(absl::StrCat("shardd_steps_aborted_total{reason=\"", reason,
                                "\"}")),
              0);
  }
  for (const char* kind :
       {"parameters", "lowp_parameters", "gradients", "optimizer_state"}) {
    EXPECT_EQ(s.at(absl::StrCat("shardd_shard_bytes{kind=\"", kind, "\"}")), 0);
  }
  EXPECT_EQ(s.at("shardd_recovery_transfers_total{result=\"failed\",role="
                 "\"target\"}"),
            0);
  EXPECT_EQ(s.at("shardd_recovery_bytes_total{direction=\"sent\"}"), 0);
  EXPECT_EQ(s.at("shardd_build_info{version=\"1.2.3\"}"), 1);
  EXPECT_EQ(s.at("shardd_ready"), 0);
  EXPECT_EQ(s.at("shardd_checkpoint_last_written_timestamp_seconds"), 0)
      << "0 before the first checkpoint";
  // No label value outside the contract before any event.
  EXPECT_FALSE(absl::StrContains(Exposition(), "other"));
}

TEST_F(PrometheusNodeObserverTest, StepCommittedCountsObservesAndSetsTheStep) {
  observer_.StepCommitted(absl::Milliseconds(5), 6);
  observer_.StepCommitted(absl::Seconds(2), 7);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_steps_committed_total"), 2);
  EXPECT_EQ(s.at("shardd_committed_step"), 7);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(s.at("shardd_step_duration_seconds_sum"), 2.005);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_bucket{le=\"0.001\"}"), 0);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_bucket{le=\"0.005\"}"), 1);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_bucket{le=\"2.5\"}"), 2);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_bucket{le=\"60\"}"), 2);
  EXPECT_EQ(s.at("shardd_step_duration_seconds_bucket{le=\"+Inf\"}"), 2);
}

TEST_F(PrometheusNodeObserverTest, StepAbortedCountsByReasonUnknownAsOther) {
  observer_.StepAborted(node_labels::kPeerFailure);
  observer_.StepAborted(node_labels::kPeerFailure);
  observer_.StepAborted(node_labels::kVoteRejected);
  observer_.StepAborted("cosmic ray");
  observer_.StepAborted("disk on fire");
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_steps_aborted_total{reason=\"peer_failure\"}"), 2);
  EXPECT_EQ(s.at("shardd_steps_aborted_total{reason=\"vote_rejected\"}"), 1);
  EXPECT_EQ(s.at("shardd_steps_aborted_total{reason=\"epoch_changed\"}"), 0);
  EXPECT_EQ(s.at("shardd_steps_aborted_total{reason=\"other\"}"), 2);
  EXPECT_FALSE(absl::StrContains(Exposition(), "cosmic"));
}

TEST_F(PrometheusNodeObserverTest,
       CollectiveDoneCountsBytesAndTimeOfSuccessesAndFailuresApart) {
  observer_.CollectiveDone(node_labels::kAllGather, node_labels::kShardGroup,
                           1 << 20, absl::Microseconds(300), true);
  observer_.CollectiveDone(node_labels::kAllGather, node_labels::kShardGroup,
                           1 << 20, absl::Milliseconds(40), true);
  observer_.CollectiveDone(node_labels::kAllReduce, node_labels::kReplicaGroup,
                           4096, absl::Seconds(30), false);
  observer_.CollectiveDone("all_to_all", node_labels::kShardGroup, 8,
                           absl::Milliseconds(1), true);
  auto s = Samples();
  const std::string ag = "{group=\"shard\",op=\"all_gather\"}";
  EXPECT_EQ(s.at("shardd_collective_bytes_total" + ag), 2 << 20);
  EXPECT_EQ(s.at("shardd_collective_duration_seconds_count" + ag), 2);
  EXPECT_DOUBLE_EQ(s.at("shardd_collective_duration_seconds_sum" + ag), 0.0403);
  EXPECT_EQ(s.at("shardd_collective_duration_seconds_bucket{group=\"shard\","
                 "le=\"0.0001\",op=\"all_gather\"}"),
            0);
  EXPECT_EQ(s.at("shardd_collective_duration_seconds_bucket{group=\"shard\","
                 "le=\"0.0005\",op=\"all_gather\"}"),
            1);
  EXPECT_EQ(s.at("shardd_collective_duration_seconds_bucket{group=\"shard\","
                 "le=\"0.05\",op=\"all_gather\"}"),
            2);
  EXPECT_EQ(s.at("shardd_collective_failures_total" + ag), 0);
  const std::string ar = "{group=\"replica\",op=\"all_reduce\"}";
  EXPECT_EQ(s.at("shardd_collective_failures_total" + ar), 1);
  EXPECT_EQ(s.at("shardd_collective_bytes_total" + ar), 0)
      << "a failed collective moved no counted bytes";
  EXPECT_EQ(s.at("shardd_collective_duration_seconds_count" + ar), 0);
  EXPECT_EQ(s.at("shardd_collective_bytes_total{group=\"shard\",op=\"other\"}"),
            8);
}

TEST_F(PrometheusNodeObserverTest, MemoryHeldSetsEveryGaugeByKind) {
  ShardBytes bytes;
  bytes.parameters = 1000;
  bytes.lowp_parameters = 500;
  bytes.gradients = 1000;
  bytes.optimizer_state = 2000;
  bytes.gathered = 4096;
  bytes.planned = 8596;
  observer_.MemoryHeld(bytes);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_shard_bytes{kind=\"parameters\"}"), 1000);
  EXPECT_EQ(s.at("shardd_shard_bytes{kind=\"lowp_parameters\"}"), 500);
  EXPECT_EQ(s.at("shardd_shard_bytes{kind=\"gradients\"}"), 1000);
  EXPECT_EQ(s.at("shardd_shard_bytes{kind=\"optimizer_state\"}"), 2000);
  EXPECT_EQ(s.at("shardd_gathered_bytes"), 4096);
  EXPECT_EQ(s.at("shardd_planned_bytes"), 8596);
  bytes.gathered = 0;
  observer_.MemoryHeld(bytes);
  EXPECT_EQ(Samples().at("shardd_gathered_bytes"), 0);
}

TEST_F(PrometheusNodeObserverTest, EpochChangedSetsEpochAndReadiness) {
  observer_.EpochChanged(4, true);
  EXPECT_EQ(Samples().at("shardd_membership_epoch"), 4);
  EXPECT_EQ(Samples().at("shardd_ready"), 1);
  observer_.EpochChanged(5, false);
  EXPECT_EQ(Samples().at("shardd_membership_epoch"), 5);
  EXPECT_EQ(Samples().at("shardd_ready"), 0);
}

TEST_F(PrometheusNodeObserverTest, RecoveryCountsBytesByDirectionAndTransfers) {
  observer_.RecoveryBytes(node_labels::kSent, 3000);
  observer_.RecoveryBytes(node_labels::kSent, 1000);
  observer_.RecoveryBytes(node_labels::kReceived, 77);
  observer_.RecoveryTransfer(node_labels::kSource, true);
  observer_.RecoveryTransfer(node_labels::kTarget, false);
  observer_.RecoveryTransfer(node_labels::kTarget, true);
  observer_.RecoveryTransfer(node_labels::kTarget, true);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_recovery_bytes_total{direction=\"sent\"}"), 4000);
  EXPECT_EQ(s.at("shardd_recovery_bytes_total{direction=\"received\"}"), 77);
  EXPECT_EQ(
      s.at("shardd_recovery_transfers_total{result=\"ok\",role=\"source\"}"),
      1);
  EXPECT_EQ(
      s.at(
          "shardd_recovery_transfers_total{result=\"failed\",role=\"source\"}"),
      0);
  EXPECT_EQ(
      s.at("shardd_recovery_transfers_total{result=\"ok\",role=\"target\"}"),
      2);
  EXPECT_EQ(
      s.at(
          "shardd_recovery_transfers_total{result=\"failed\",role=\"target\"}"),
      1);
}

TEST_F(PrometheusNodeObserverTest, PrefetchCountsHintsByResultAndUses) {
  auto zero = Samples();
  for (const char* result : {"started", "not_needed", "dropped"}) {
    EXPECT_EQ(zero.at(absl::StrCat("shardd_prefetch_hints_total{result=\"",
                                   result, "\"}")),
              0)
        << result;
  }
  EXPECT_EQ(zero.at("shardd_prefetched_gathers_total"), 0);
  observer_.PrefetchHint(node_labels::kStarted);
  observer_.PrefetchHint(node_labels::kStarted);
  observer_.PrefetchHint(node_labels::kDropped);
  observer_.PrefetchHint("typo");  // Recorded as "other", never a new series.
  observer_.PrefetchUsed();
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_prefetch_hints_total{result=\"started\"}"), 2);
  EXPECT_EQ(s.at("shardd_prefetch_hints_total{result=\"not_needed\"}"), 0);
  EXPECT_EQ(s.at("shardd_prefetch_hints_total{result=\"dropped\"}"), 1);
  EXPECT_EQ(s.at("shardd_prefetch_hints_total{result=\"other\"}"), 1);
  EXPECT_EQ(s.count("shardd_prefetch_hints_total{result=\"typo\"}"), 0u);
  EXPECT_EQ(s.at("shardd_prefetched_gathers_total"), 1);
}

TEST_F(PrometheusNodeObserverTest, CheckpointTimestampIsTheNewestCheckpoint) {
  observer_.CheckpointWritten(now_ - absl::Seconds(90));
  observer_.CheckpointWritten(now_ - absl::Seconds(30));
  observer_.CheckpointRestored();
  observer_.CheckpointWriteFailed();
  observer_.CheckpointSkipped();
  observer_.CheckpointSkipped();
  observer_.CheckpointStagingBytes(12345);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_checkpoints_written_total"), 2);
  EXPECT_EQ(s.at("shardd_checkpoint_write_failures_total"), 1);
  EXPECT_EQ(s.at("shardd_checkpoints_skipped_total"), 2);
  EXPECT_EQ(s.at("shardd_checkpoint_staging_bytes"), 12345);
  EXPECT_EQ(s.at("shardd_checkpoint_restores_total"), 1);
  EXPECT_EQ(s.at("shardd_checkpoint_last_written_timestamp_seconds"),
            1'700'000'000 - 30);
  // An older checkpoint reported late does not move it back.
  observer_.CheckpointWritten(now_ - absl::Seconds(500));
  EXPECT_EQ(Samples().at("shardd_checkpoint_last_written_timestamp_seconds"),
            1'700'000'000 - 30);
}

TEST_F(PrometheusNodeObserverTest, TrainerLastCallIsTheLatestCall) {
  EXPECT_EQ(Samples().at("shardd_trainer_last_call_timestamp_seconds"), 0);
  observer_.TrainerCalled(now_ - absl::Seconds(12));
  observer_.TrainerCalled(now_ - absl::Seconds(2));
  EXPECT_EQ(Samples().at("shardd_trainer_last_call_timestamp_seconds"),
            1'700'000'000 - 2);
}

TEST_F(PrometheusNodeObserverTest,
       ShmLeftoversFollowTheLatestSweepAndSweptCountersAdd) {
  auto zero = Samples();
  EXPECT_EQ(zero.at("shardd_shm_leftover_bytes"), 0);
  EXPECT_EQ(zero.at("shardd_shm_swept_files_total"), 0);
  EXPECT_EQ(zero.at("shardd_shm_swept_bytes_total"), 0);
  observer_.ShmLeftoverBytes(3 << 20);
  observer_.ShmSwept(2, 1 << 20);
  observer_.ShmSwept(3, 4096);
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_shm_leftover_bytes"), 3 << 20);
  EXPECT_EQ(s.at("shardd_shm_swept_files_total"), 5);
  EXPECT_EQ(s.at("shardd_shm_swept_bytes_total"), (1 << 20) + 4096);
  // The gauge is the latest sweep's finding, not a sum.
  observer_.ShmLeftoverBytes(0);
  observer_.ShmSwept(0, 0);
  s = Samples();
  EXPECT_EQ(s.at("shardd_shm_leftover_bytes"), 0);
  EXPECT_EQ(s.at("shardd_shm_swept_files_total"), 5);
  EXPECT_EQ(s.at("shardd_shm_swept_bytes_total"), (1 << 20) + 4096);
}

TEST_F(PrometheusNodeObserverTest, MemoryAdmissionsAndUsableBytesByLabel) {
  auto zero = Samples();
  EXPECT_EQ(zero.at("shardd_memory_admissions_total{request=\"register_model\","
                    "result=\"refused\"}"),
            0);
  EXPECT_EQ(zero.at("shardd_memory_admission_usable_bytes{scope=\"shm\"}"), 0);
  observer_.MemoryAdmission(node_labels::kAdmitRegisterModel, false);
  observer_.MemoryAdmission(node_labels::kAdmitRegisterModel, true);
  observer_.MemoryAdmission(node_labels::kAdmitAccumulation, false);
  observer_.MemoryAdmission("typo", false);
  observer_.MemoryLimit(node_labels::kLimitHost, 1 << 30);
  observer_.MemoryLimit(node_labels::kLimitHost, 1 << 29);  // The latest.
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_memory_admissions_total{request=\"register_model\","
                 "result=\"refused\"}"),
            1);
  EXPECT_EQ(s.at("shardd_memory_admissions_total{request=\"register_model\","
                 "result=\"admitted\"}"),
            1);
  EXPECT_EQ(s.at("shardd_memory_admissions_total{request=\"accumulation\","
                 "result=\"refused\"}"),
            1);
  EXPECT_EQ(s.at("shardd_memory_admissions_total{request=\"other\","
                 "result=\"refused\"}"),
            1);
  EXPECT_EQ(s.at("shardd_memory_admission_usable_bytes{scope=\"host\"}"),
            1 << 29);
}

TEST_F(PrometheusNodeObserverTest, TrainerWaitIsOneObservationPerCallByCall) {
  auto zero = Samples();
  for (const char* call : {"gather", "reduce_grad", "step"}) {
    EXPECT_EQ(zero.at(absl::StrCat("shardd_trainer_wait_seconds_count{call=\"",
                                   call, "\"}")),
              0)
        << call;
  }
  observer_.TrainerWaited(node_labels::kCallGather, absl::Milliseconds(3));
  observer_.TrainerWaited(node_labels::kCallGather, absl::ZeroDuration());
  observer_.TrainerWaited(node_labels::kCallStep, absl::Milliseconds(250));
  observer_.TrainerWaited("typo", absl::Seconds(1));
  // A clock that stepped back is no negative wait.
  observer_.TrainerWaited(node_labels::kCallReduceGrad, -absl::Seconds(1));
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_trainer_wait_seconds_count{call=\"gather\"}"), 2);
  EXPECT_DOUBLE_EQ(s.at("shardd_trainer_wait_seconds_sum{call=\"gather\"}"),
                   0.003);
  // A call that waited for nothing lands in the first bucket.
  EXPECT_EQ(
      s.at("shardd_trainer_wait_seconds_bucket{call=\"gather\",le=\"0.0001\"}"),
      1);
  EXPECT_DOUBLE_EQ(s.at("shardd_trainer_wait_seconds_sum{call=\"step\"}"),
                   0.25);
  EXPECT_EQ(s.at("shardd_trainer_wait_seconds_count{call=\"reduce_grad\"}"), 1);
  EXPECT_EQ(s.at("shardd_trainer_wait_seconds_sum{call=\"reduce_grad\"}"), 0);
  EXPECT_EQ(s.at("shardd_trainer_wait_seconds_count{call=\"other\"}"), 1);
}

TEST_F(PrometheusNodeObserverTest, ConcurrentEventsAreAllCounted) {
  constexpr int kThreads = 4;
  constexpr int kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        observer_.StepAborted(node_labels::kEpochChanged);
        observer_.StepAborted("unknown");  // The locked "other" path.
        observer_.CollectiveDone(node_labels::kReduceScatter,
                                 node_labels::kShardGroup, 10,
                                 absl::Microseconds(50), true);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto s = Samples();
  EXPECT_EQ(s.at("shardd_steps_aborted_total{reason=\"epoch_changed\"}"),
            kThreads * kEach);
  EXPECT_EQ(s.at("shardd_steps_aborted_total{reason=\"other\"}"),
            kThreads * kEach);
  EXPECT_EQ(s.at("shardd_collective_bytes_total{group=\"shard\",op=\"reduce_"
                 "scatter\"}"),
            10.0 * kThreads * kEach);
}

TEST_F(PrometheusNodeObserverTest, PromtoolAcceptsTheExpositionAfterEvents) {
  ASSERT_TRUE(PromtoolCheckMetrics(Exposition()).ok())
      << PromtoolCheckMetrics(Exposition());
  observer_.StepCommitted(absl::Milliseconds(12), 1);
  observer_.StepAborted("other reason");
  observer_.CollectiveDone("new_op", "new_group", 5, absl::Milliseconds(1),
                           true);
  observer_.MemoryHeld({1, 2, 3, 4, 5, 15});
  observer_.EpochChanged(2, true);
  observer_.RecoveryBytes(node_labels::kReceived, 9);
  observer_.RecoveryTransfer(node_labels::kTarget, true);
  observer_.CheckpointWritten(now_ - absl::Seconds(1));
  observer_.CheckpointRestored();
  observer_.CheckpointWriteFailed();
  observer_.ShmLeftoverBytes(8192);
  observer_.ShmSwept(1, 4096);
  observer_.MemoryAdmission(node_labels::kAdmitExport, false);
  observer_.MemoryLimit(node_labels::kLimitDevice, 1 << 20);
  observer_.TrainerWaited(node_labels::kCallReduceGrad, absl::Milliseconds(7));
  const std::string text = Exposition();
  ASSERT_TRUE(absl::StrContains(
      text, "shardd_checkpoint_last_written_timestamp_seconds 1699999999"))
      << text;
  const absl::Status check = PromtoolCheckMetrics(text);
  EXPECT_TRUE(check.ok()) << check << "\n" << text;
}

}  // namespace
}  // namespace shardd::metrics
