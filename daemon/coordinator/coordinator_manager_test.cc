#include "daemon/coordinator/coordinator_manager.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/manual_clock.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

class CoordinatorManagerTest : public ::testing::Test {
 protected:
  void Make(Prober prober = nullptr) {
    CoordinatorOptions options;
    options.decision_log = decision_log_;
    options.membership.world_size = 4;
    options.membership.sharding_factor = 2;
    options.membership.detector.lease = absl::Milliseconds(1500);
    options.membership.detector.check_period = check_period_;
    options.join_timeout = absl::Seconds(60);
    options.observer = observer_;
    auto clock = std::make_unique<ManualClock>();
    clock_ = clock.get();
    auto m = CoordinatorManager::Create(options, std::move(clock),
                                        std::move(prober));
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = *std::move(m);
  }

  JoinOutcome JoinRank(int r) {
    JoinRequestInfo req;
    req.rank = r;
    req.identity = absl::StrCat("pod-", r);
    req.peer_address = absl::StrCat("127.0.0.1:", 9000 + r);
    req.incarnation = "i1";
    auto out = manager_->Join(req);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  }

  // All four ranks joined and READY in the last epoch; their tokens.
  std::vector<std::string> ReadyCluster() {
    std::vector<JoinOutcome> joined;
    for (int r = 0; r < 4; ++r) joined.push_back(JoinRank(r));
    const int64_t epoch = joined.back().epoch;
    std::vector<std::string> tokens;
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(manager_
                      ->Heartbeat(r, joined[r].lease_token, epoch, 0,
                                  MemberPhase::kReady)
                      .ok());
      tokens.push_back(joined[r].lease_token);
    }
    EXPECT_TRUE(manager_->Snapshot().ready);
    return tokens;
  }

  ManualClock* clock_ = nullptr;
  metrics::CoordinatorObserver* observer_ = nullptr;  // Set before Make().
  std::shared_ptr<DecisionLog> decision_log_;         // Set before Make().
  // The lease timer's period, or zero: Tick only when a test calls it.
  absl::Duration check_period_ = absl::ZeroDuration();  // Set before Make().
  std::unique_ptr<CoordinatorManager> manager_;
};

TEST_F(CoordinatorManagerTest, CommitVoteReturnsTheSameDecisionToAll) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  std::vector<absl::StatusOr<CommitDecision>> out(4, absl::UnknownError(""));
  std::vector<std::thread> voters;
  for (int r = 0; r < 4; ++r) {
    voters.emplace_back([&, r] {
      out[r] = manager_->ShouldCommit(epoch, 1, CommitVote{r, true, "", 42},
                                      tokens[r], MonoNow() + absl::Seconds(30));
    });
  }
  for (std::thread& t : voters) t.join();
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status();
    EXPECT_TRUE(out[r]->commit);
    EXPECT_EQ(out[r]->step, 1);
  }
  EXPECT_EQ(manager_->Snapshot().committed_step, 1);
  // A retried call gets the recorded decision; the next step must be 2.
  absl::StatusOr<CommitDecision> again = manager_->ShouldCommit(
      epoch, 1, CommitVote{0, true, "", 42}, tokens[0], MonoNow());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->commit);
  EXPECT_EQ(manager_
                ->ShouldCommit(epoch, 3, CommitVote{0, true, "", 42}, tokens[0],
                               MonoNow())
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

// The coordinator decides to commit step 1 and dies with every voter in
// doubt (none heard the answer). Its successor reads the decision log: the
// first member that re-joins in doubt about step 1, voted with the same
// fingerprint, settles it as committed; one voted on another job's step
// (another fingerprint) does not.
TEST_F(CoordinatorManagerTest,
       ARecordedCommitSettlesTheInDoubtStepAfterARestart) {
  char dir[] = "/tmp/coordinator_manager_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/decisions.log";
  auto opened = DecisionLog::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  decision_log_ = std::move(*opened);
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  std::vector<std::thread> voters;
  for (int r = 0; r < 4; ++r) {
    voters.emplace_back([&, r] {
      EXPECT_TRUE(manager_
                      ->ShouldCommit(epoch, 1, CommitVote{r, true, "", 42},
                                     tokens[r], MonoNow() + absl::Seconds(30))
                      .ok());
    });
  }
  for (std::thread& t : voters) t.join();
  ASSERT_TRUE(decision_log_->last().has_value());
  EXPECT_EQ(decision_log_->last()->step, 1);
  EXPECT_EQ(decision_log_->last()->fingerprint, 42u);

  const auto rejoin = [&](uint64_t fingerprint) {
    auto log = DecisionLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    decision_log_ = std::move(*log);
    Make();  // The successor, on the same file.
    JoinRequestInfo req;
    req.rank = 2;
    req.identity = "pod-2";
    req.peer_address = "127.0.0.1:9002";
    req.incarnation = "i1";
    req.holds_shard = true;
    req.last_committed_step = 0;
    req.pending_step = 1;
    req.pending_step_fingerprint = fingerprint;
    ASSERT_TRUE(manager_->Join(req).ok());
  };
  rejoin(7);  // Another job's step 1.
  EXPECT_EQ(manager_->Snapshot().committed_step, 0);
  rejoin(42);
  EXPECT_EQ(manager_->Snapshot().committed_step, 1);
  std::filesystem::remove_all(dir);
}

TEST_F(CoordinatorManagerTest, CommitVoteIsAbortedWhenAMemberDiesWaiting) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  absl::StatusOr<CommitDecision> out = absl::UnknownError("");
  std::thread voter([&] {
    out = manager_->ShouldCommit(epoch, 1, CommitVote{0, true, "", 1},
                                 tokens[0], MonoNow() + absl::Seconds(30));
  });
  // Ranks 1..3 never vote; rank 3's lease runs out (the others renew).
  for (int i = 0; i < 4; ++i) {
    clock_->Advance(absl::Milliseconds(500));
    for (int r = 0; r < 3; ++r) {
      (void)manager_->Heartbeat(r, tokens[r], epoch, 0, MemberPhase::kReady);
    }
    manager_->Tick();
  }
  voter.join();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted) << out.status();
  EXPECT_EQ(manager_->Snapshot().committed_step, 0);
}

TEST_F(CoordinatorManagerTest, CommitVoteRejectsStaleEpochAndStrangers) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  EXPECT_EQ(manager_
                ->ShouldCommit(epoch - 1, 1, CommitVote{0, true, "", 1},
                               tokens[0], MonoNow())
                .status()
                .code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(manager_
                ->ShouldCommit(epoch, 1, CommitVote{0, true, "", 1}, "forged",
                               MonoNow())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  // Nothing was recorded: a full ballot still decides.
  EXPECT_EQ(manager_->Snapshot().committed_step, 0);
}

TEST_F(CoordinatorManagerTest, ReportWithoutSuspectStartsEpochRemovingNobody) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  absl::StatusOr<ReportOutcome> out =
      manager_->ReportFailure(1, tokens[1], epoch, -1, "trainer restarted");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->removed.empty());
  EXPECT_EQ(out->epoch, epoch + 1);
  int live = 0;
  for (const SlotRecord& s : manager_->Snapshot().slots) live += s.live();
  EXPECT_EQ(live, 4);
}

TEST_F(CoordinatorManagerTest, LeaseTokensAreDistinctAndStoreFollowsEpoch) {
  Make();
  const JoinOutcome a = JoinRank(0);
  const JoinOutcome b = JoinRank(1);
  EXPECT_NE(a.lease_token, b.lease_token);
  EXPECT_EQ(manager_->rendezvous().epoch(), b.epoch);
  EXPECT_EQ(manager_->Snapshot().epoch, b.epoch);
}

TEST_F(CoordinatorManagerTest,
       RendezvousIsForLiveMembersEachWritingItsOwnKeys) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  ASSERT_TRUE(
      manager_->RendezvousSet(tokens[1], epoch, "model/1", "spec", false).ok());
  // Another rank's key: refused, nothing written.
  const absl::Status other =
      manager_->RendezvousSet(tokens[1], epoch, "model/0", "evil", false);
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied) << other;
  EXPECT_EQ(
      manager_->RendezvousGet(tokens[0], epoch, "model/0").status().code(),
      absl::StatusCode::kNotFound);
  // Every member reads (and waits for) every rank's keys.
  auto read = manager_->RendezvousGet(tokens[3], epoch, "model/1");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "spec");
  auto waited = manager_->RendezvousWait(tokens[2], epoch, {"model/1"},
                                         MonoNow() + absl::Seconds(5));
  ASSERT_TRUE(waited.ok()) << waited.status();
  // Its owner may replace a model key (a registration after a failed
  // exchange); Gloo and NCCL keys keep their first value.
  EXPECT_TRUE(
      manager_->RendezvousSet(tokens[1], epoch, "model/1", "spec2", false)
          .ok());
  EXPECT_EQ(*manager_->RendezvousGet(tokens[0], epoch, "model/1"), "spec2");
  const std::string gloo = absl::StrCat("gloo/1/epoch/", epoch, "/world/1");
  ASSERT_TRUE(manager_->RendezvousSet(tokens[1], epoch, gloo, "a", false).ok());
  EXPECT_EQ(manager_->RendezvousSet(tokens[1], epoch, gloo, "b", false).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*manager_->RendezvousGet(tokens[0], epoch, gloo), "a");
  // A stranger does none of it.
  EXPECT_EQ(manager_->RendezvousSet("", epoch, "model/0", "x", false).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(manager_->RendezvousGet("nope", epoch, "model/1").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(manager_
                ->RendezvousWait("nope", epoch, {"model/1"},
                                 MonoNow() + absl::Seconds(5))
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(CoordinatorManagerTest, ARemovedMembersTokenNoLongerReachesTheStore) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  ASSERT_TRUE(manager_->Leave(2, tokens[2], "drain").ok());
  const int64_t epoch = manager_->Snapshot().epoch;
  const absl::Status s =
      manager_->RendezvousSet(tokens[2], epoch, "model/2", "stale", false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  // The others' tokens still work, in the new epoch.
  EXPECT_TRUE(
      manager_->RendezvousSet(tokens[0], epoch, "model/0", "v", false).ok());
}

TEST_F(CoordinatorManagerTest, LeaseReportsTheRenewedExpiryAndTheEpoch) {
  Make();
  const JoinOutcome a = JoinRank(0);
  clock_->Advance(absl::Milliseconds(400));
  ASSERT_TRUE(
      manager_->Heartbeat(0, a.lease_token, a.epoch, 0, MemberPhase::kJoining)
          .ok());
  const LeaseView lease = manager_->Lease(0);
  EXPECT_EQ(lease.lease_expiry,
            clock_->MonotonicNow() + absl::Milliseconds(1500));
  EXPECT_EQ(lease.lease, absl::Milliseconds(1500));
  EXPECT_EQ(lease.epoch, a.epoch);
  EXPECT_FALSE(lease.ready);
}

TEST_F(CoordinatorManagerTest,
       TheHeartbeatReplyNamesTheNewestStepEveryRankHolds) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  // Rank 2's disk is slow: it holds step 3 only; the others 3 and 6.
  LeaseView lease;
  for (int r = 0; r < 4; ++r) {
    CheckpointInventory held;
    held.keeps = true;
    held.steps = r == 2 ? std::vector<int64_t>{3} : std::vector<int64_t>{3, 6};
    ASSERT_TRUE(manager_
                    ->Heartbeat(r, tokens[r], epoch, 6, MemberPhase::kReady, {},
                                &held, &lease)
                    .ok());
    EXPECT_EQ(lease.common_checkpoint_step, r < 3 ? -1 : 3) << r;
  }
  EXPECT_EQ(manager_->Lease(1).common_checkpoint_step, 3);
  CheckpointInventory caught_up{.keeps = true, .steps = {3, 6}, .problem = ""};
  ASSERT_TRUE(manager_
                  ->Heartbeat(2, tokens[2], epoch, 6, MemberPhase::kReady, {},
                              &caught_up, &lease)
                  .ok());
  EXPECT_EQ(lease.common_checkpoint_step, 6);
}

TEST_F(CoordinatorManagerTest, DecisionWithoutNewEpochStillWakesWatchers) {
  Make();
  const ClusterSnapshot before = manager_->Snapshot();
  clock_->Advance(absl::Seconds(61));
  manager_->Tick();  // Nobody joined within the join timeout: a decision.
  const ClusterSnapshot after =
      manager_->AwaitChange(before.version, MonoNow() + absl::Seconds(5));
  EXPECT_GT(after.version, before.version);
  EXPECT_EQ(after.epoch, before.epoch);
  ASSERT_FALSE(after.decisions.empty());
  EXPECT_EQ(after.decisions.front().kind, DecisionKind::kJoinTimeout);
  EXPECT_EQ(after.last_reason, after.decisions.front().reason);
}

TEST_F(CoordinatorManagerTest, TickExpiresSilentMembersAndWakesWatchers) {
  Make();
  std::vector<JoinOutcome> joined;
  for (int r = 0; r < 4; ++r) joined.push_back(JoinRank(r));
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(manager_
                    ->Heartbeat(r, joined[r].lease_token,
                                manager_->Snapshot().epoch, 0,
                                MemberPhase::kReady)
                    .ok());
  }
  const ClusterSnapshot ready = manager_->Snapshot();
  ASSERT_TRUE(ready.ready);
  EXPECT_EQ(manager_->Tick(),
            clock_->MonotonicNow() + absl::Milliseconds(1500));

  std::atomic<int64_t> woke_epoch{-1};
  std::thread watcher([&] {
    woke_epoch =
        manager_->AwaitChange(ready.version, MonoTime::InfiniteFuture()).epoch;
  });
  clock_->Advance(absl::Milliseconds(1000));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(manager_
                    ->Heartbeat(r, joined[r].lease_token, ready.epoch, 0,
                                MemberPhase::kReady)
                    .ok());
  }
  clock_->Advance(absl::Milliseconds(500));
  manager_->Tick();  // Rank 3 is 1500 ms silent: removed.
  watcher.join();
  EXPECT_EQ(woke_epoch, ready.epoch + 1);
  const ClusterSnapshot after = manager_->Snapshot();
  EXPECT_FALSE(after.ready);
  EXPECT_EQ(after.slots[3].phase, MemberPhase::kFailed);
  EXPECT_NE(after.last_reason.find("lease expired"), std::string::npos);
}

// The case: the wall clock steps by a minute either way while a
// ready cluster heartbeats normally. Leases, the lease timer and the join
// timeout run on the monotonic side, so nobody is removed and the epoch
// stays; a member that then really goes silent is still removed one lease
// after its last heartbeat.
TEST_F(CoordinatorManagerTest, WallClockStepsNeitherExpireNorExtendLeases) {
  Make();
  const std::vector<std::string> tokens = ReadyCluster();
  const ClusterSnapshot ready = manager_->Snapshot();
  const auto heartbeat_all = [&](int ranks) {
    for (int r = 0; r < ranks; ++r) {
      ASSERT_TRUE(
          manager_->Heartbeat(r, tokens[r], ready.epoch, 0, MemberPhase::kReady)
              .ok());
    }
  };
  for (const absl::Duration step : {absl::Seconds(60), absl::Seconds(-60),
                                    absl::Seconds(-60), absl::Seconds(60)}) {
    clock_->Advance(absl::Milliseconds(500));
    heartbeat_all(4);
    clock_->StepWall(step);
    EXPECT_EQ(manager_->Tick(),
              clock_->MonotonicNow() + absl::Milliseconds(1500));
    const ClusterSnapshot s = manager_->Snapshot();
    ASSERT_TRUE(s.ready) << s.last_reason;
    EXPECT_EQ(s.epoch, ready.epoch);
    EXPECT_EQ(s.version, ready.version);
  }
  // A real silence after the steps: ranks 0-2 keep heartbeating, rank 3
  // stops. It is removed exactly when its lease runs out, not 60 s early or
  // late.
  const MonoTime last = clock_->MonotonicNow();
  clock_->Advance(absl::Milliseconds(1000));
  clock_->StepWall(absl::Seconds(-60));
  heartbeat_all(3);
  clock_->Advance(absl::Milliseconds(499));
  manager_->Tick();
  EXPECT_TRUE(manager_->Snapshot().ready);
  clock_->Advance(absl::Milliseconds(1));
  clock_->StepWall(absl::Seconds(120));
  manager_->Tick();
  const ClusterSnapshot after = manager_->Snapshot();
  EXPECT_FALSE(after.ready);
  EXPECT_EQ(after.slots[3].phase, MemberPhase::kFailed);
  EXPECT_EQ(clock_->MonotonicNow() - last, absl::Milliseconds(1500));
  const auto removed = std::find_if(
      after.decisions.begin(), after.decisions.end(),
      [](const Decision& d) { return d.kind == DecisionKind::kMemberRemoved; });
  ASSERT_NE(removed, after.decisions.end());
  EXPECT_EQ(removed->ranks, std::vector<int>{3});
  EXPECT_NE(removed->reason.find("lease expired 0 ms ago"), std::string::npos)
      << removed->reason;
}

// Times people read are wall times: a decision's and the start's follow the
// wall clock as it is when the snapshot is taken.
TEST_F(CoordinatorManagerTest, SnapshotShowsDecisionsOnTheWallClock) {
  Make();
  JoinRank(0);
  const ClusterSnapshot s = manager_->Snapshot();
  ASSERT_FALSE(s.decisions.empty());
  EXPECT_EQ(s.WallTimeOf(s.decisions.front().time), clock_->WallNow());
  EXPECT_EQ(s.started, clock_->WallNow());
  clock_->Advance(absl::Seconds(2));
  clock_->StepWall(absl::Seconds(-60));
  const ClusterSnapshot later = manager_->Snapshot();
  EXPECT_EQ(later.WallTimeOf(later.decisions.front().time),
            clock_->WallNow() - absl::Seconds(2));
}

TEST_F(CoordinatorManagerTest, ReportFailureProbesTheSuspectOutsideTheLock) {
  std::atomic<int> probes{0};
  std::string probed;
  Make([&](const std::string& address) {
    ++probes;
    probed = address;
    // The manager must not hold its lock while probing.
    manager_->Snapshot();
    return ProbeResult::kUnreachable;
  });
  std::vector<JoinOutcome> joined;
  for (int r = 0; r < 4; ++r) joined.push_back(JoinRank(r));
  const int64_t epoch = manager_->Snapshot().epoch;
  auto out = manager_->ReportFailure(0, joined[0].lease_token, epoch, 2,
                                     "reduce-scatter timed out");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(probes, 1);
  EXPECT_EQ(probed, "127.0.0.1:9002");
  EXPECT_EQ(out->removed, std::vector<int>{2});
  EXPECT_EQ(manager_->rendezvous().epoch(), out->epoch);
}

TEST_F(CoordinatorManagerTest, MemberStateChangeWakesWatchers) {
  Make();
  const JoinOutcome a = JoinRank(0);
  const ClusterSnapshot before = manager_->Snapshot();
  ASSERT_TRUE(manager_
                  ->Heartbeat(0, a.lease_token, before.epoch, 0,
                              MemberPhase::kRecovering)
                  .ok());
  // Not ready (3 slots empty) and no new epoch, but rank 0 changed state
  // (a READY counts only once every slot is claimed and planned).
  const ClusterSnapshot after =
      manager_->AwaitChange(before.version, MonoNow() + absl::Seconds(30));
  EXPECT_GT(after.version, before.version);
  EXPECT_EQ(after.slots[0].phase, MemberPhase::kRecovering);
  // A heartbeat that changes nothing does not wake watchers.
  ASSERT_TRUE(manager_
                  ->Heartbeat(0, a.lease_token, before.epoch, 0,
                              MemberPhase::kRecovering)
                  .ok());
  EXPECT_EQ(manager_->Snapshot().version, after.version);
}

TEST_F(CoordinatorManagerTest, JoinTimeoutIsRecordedOnce) {
  Make();
  JoinRank(0);
  clock_->Advance(absl::Seconds(61));
  manager_->Tick();
  manager_->Tick();
  int timeouts = 0;
  for (const Decision& d : manager_->Snapshot().decisions) {
    if (d.kind == DecisionKind::kJoinTimeout) {
      ++timeouts;
      EXPECT_NE(d.reason.find("4 of 4 slots not READY"), std::string::npos)
          << d.reason;
      EXPECT_NE(d.reason.find("1 (EMPTY)"), std::string::npos) << d.reason;
    }
  }
  EXPECT_EQ(timeouts, 1);
}

TEST_F(CoordinatorManagerTest, ShutdownWakesWatchersAndRefusesJoins) {
  Make();
  std::thread watcher(
      [&] { manager_->AwaitChange(1'000'000, MonoTime::InfiniteFuture()); });
  manager_->Shutdown();
  watcher.join();
  JoinRequestInfo req;
  req.identity = "late";
  req.peer_address = "127.0.0.1:1";
  EXPECT_EQ(manager_->Join(req).status().code(),
            absl::StatusCode::kUnavailable);
}

// Records what the manager tells its observer.
class RecordingObserver : public metrics::CoordinatorObserver {
 public:
  void EpochChanged(int64_t epoch, bool ready) override {
    absl::MutexLock lock(&mu_);
    epochs.push_back({epoch, ready});
  }
  void Members(int live, int expected) override {
    absl::MutexLock lock(&mu_);
    this->live = live;
    this->expected = expected;
  }
  void CommittedStep(int64_t step) override {
    absl::MutexLock lock(&mu_);
    committed_step = step;
  }
  void MemberFailed(absl::string_view cause) override {
    absl::MutexLock lock(&mu_);
    ++failures[std::string(cause)];
  }
  void FailureReport(absl::string_view result) override {
    absl::MutexLock lock(&mu_);
    reports.emplace_back(result);
  }
  void Lease(absl::Duration lease) override {
    absl::MutexLock lock(&mu_);
    this->lease = lease;
  }
  void RecoveryStarted() override {
    absl::MutexLock lock(&mu_);
    ++recoveries_started;
  }
  void RecoveryCompleted() override {
    absl::MutexLock lock(&mu_);
    ++recoveries_completed;
  }
  void RecoveryPhase(absl::string_view phase, absl::Duration d) override {
    absl::MutexLock lock(&mu_);
    phases[std::string(phase)].push_back(d);
  }
  void CoordinatorStalled() override {
    absl::MutexLock lock(&mu_);
    ++stalls;
  }

  absl::Mutex mu_;
  std::vector<std::pair<int64_t, bool>> epochs;
  int live = -1;
  int expected = -1;
  int64_t committed_step = -1;
  std::map<std::string, int> failures;
  std::vector<std::string> reports;
  absl::Duration lease;
  int recoveries_started = 0;
  int recoveries_completed = 0;
  std::map<std::string, std::vector<absl::Duration>> phases;
  int stalls = 0;
};

class CoordinatorManagerObserverTest : public CoordinatorManagerTest {
 protected:
  CoordinatorManagerObserverTest() { observer_ = &recorder_; }

  // All four ranks joined and READY; returns their join outcomes.
  std::vector<JoinOutcome> ReadyCluster() {
    std::vector<JoinOutcome> joined;
    for (int r = 0; r < 4; ++r) joined.push_back(JoinRank(r));
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(manager_
                      ->Heartbeat(r, joined[r].lease_token,
                                  manager_->Snapshot().epoch, 0,
                                  MemberPhase::kReady)
                      .ok());
    }
    EXPECT_TRUE(manager_->Snapshot().ready);
    return joined;
  }

  // Advances the clock by `d` in heartbeat intervals; the `ranks` renew
  // their leases (READY in the current epoch) and leases are checked.
  void Pass(absl::Duration d, const std::vector<JoinOutcome>& joined,
            const std::vector<int>& ranks) {
    for (absl::Duration left = d; left > absl::ZeroDuration();
         left -= absl::Milliseconds(500)) {
      clock_->Advance(std::min(left, absl::Milliseconds(500)));
      ReportReady(joined, ranks);
      manager_->Tick();
    }
  }
  void ReportReady(const std::vector<JoinOutcome>& joined,
                   const std::vector<int>& ranks) {
    const int64_t epoch = manager_->Snapshot().epoch;
    for (int r : ranks) {
      EXPECT_TRUE(manager_
                      ->Heartbeat(r, joined[r].lease_token, epoch, 0,
                                  MemberPhase::kReady)
                      .ok());
    }
  }
  // A new incarnation of rank r's identity joins (it holds no shard).
  JoinOutcome Replace(int r) {
    JoinRequestInfo req;
    req.rank = r;
    req.identity = absl::StrCat("pod-", r);
    req.peer_address = absl::StrCat("127.0.0.1:", 9100 + r);
    req.incarnation = "i2";
    auto out = manager_->Join(req);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  }
  // The one observation of each recovery phase, in milliseconds.
  std::map<std::string, int64_t> PhasesMs() {
    std::map<std::string, int64_t> out;
    for (const auto& [phase, ds] : recorder_.phases) {
      EXPECT_EQ(ds.size(), 1u) << phase;
      if (!ds.empty()) out[phase] = absl::ToInt64Milliseconds(ds[0]);
    }
    return out;
  }

  RecordingObserver recorder_;
};

TEST_F(CoordinatorManagerObserverTest,
       ReportsLeaseMembersEpochsAndReadinessAsTheyChange) {
  Make();
  EXPECT_EQ(recorder_.lease, absl::Milliseconds(1500));
  EXPECT_EQ(recorder_.live, 0);
  EXPECT_EQ(recorder_.expected, 4);
  EXPECT_EQ(recorder_.committed_step, 0);
  ASSERT_EQ(recorder_.epochs.size(), 1u);
  EXPECT_EQ(recorder_.epochs[0], std::make_pair(int64_t{0}, false));
  ReadyCluster();
  EXPECT_EQ(recorder_.live, 4);
  const int64_t epoch = manager_->Snapshot().epoch;
  ASSERT_FALSE(recorder_.epochs.empty());
  EXPECT_EQ(recorder_.epochs.back(), std::make_pair(epoch, true));
  // One report per change: the forming epoch 1 (the first three joins),
  // epoch 2 (the last join), then readiness.
  EXPECT_EQ(recorder_.epochs.size(), 4u);
  EXPECT_TRUE(recorder_.failures.empty());
}

TEST_F(CoordinatorManagerObserverTest, LeaseExpiryIsTheCauseOfTickRemovals) {
  Make();
  std::vector<JoinOutcome> joined = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  clock_->Advance(absl::Milliseconds(1000));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        manager_
            ->Heartbeat(r, joined[r].lease_token, epoch, 0, MemberPhase::kReady)
            .ok());
  }
  clock_->Advance(absl::Milliseconds(500));
  manager_->Tick();  // Ranks 2 and 3 are 1500 ms silent.
  EXPECT_EQ(recorder_.failures,
            (std::map<std::string, int>{{"lease_expired", 2}}));
  EXPECT_EQ(recorder_.live, 2);
  EXPECT_EQ(recorder_.epochs.back(), std::make_pair(epoch + 1, false));
}

TEST_F(CoordinatorManagerObserverTest,
       ReportsAreRemovedDismissedOrStaleWithTheReportKindAsCause) {
  ProbeResult probe = ProbeResult::kAlive;
  Make([&](const std::string&) { return probe; });
  std::vector<JoinOutcome> joined = ReadyCluster();
  const int64_t epoch = manager_->Snapshot().epoch;
  // Both alive: the link failed, nobody is removed.
  auto dismissed = manager_->ReportFailure(
      0, joined[0].lease_token, epoch, 1,
      "FAILURE_KIND_COLLECTIVE_FAILED: allgather unit 3: reset");
  ASSERT_TRUE(dismissed.ok()) << dismissed.status();
  ASSERT_TRUE(dismissed->removed.empty());
  // The suspect does not answer: removed, with the report's kind as cause.
  probe = ProbeResult::kUnreachable;
  auto removed = manager_->ReportFailure(
      0, joined[0].lease_token, dismissed->epoch, 2,
      "FAILURE_KIND_COLLECTIVE_TIMEOUT: reduce-scatter unit 1");
  ASSERT_TRUE(removed.ok()) << removed.status();
  ASSERT_EQ(removed->removed, std::vector<int>{2});
  // A report for an epoch already handled.
  auto stale = manager_->ReportFailure(0, joined[0].lease_token, epoch, 3,
                                       "FAILURE_KIND_PEER_UNREACHABLE: x");
  ASSERT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  // A report the table refuses outright is no report result.
  EXPECT_FALSE(manager_
                   ->ReportFailure(0, "wrong-token", removed->epoch, 3,
                                   "FAILURE_KIND_PEER_UNREACHABLE: x")
                   .ok());
  EXPECT_EQ(recorder_.reports,
            (std::vector<std::string>{"dismissed", "removed", "stale"}));
  EXPECT_EQ(recorder_.failures,
            (std::map<std::string, int>{{"collective_timeout", 1}}));
  EXPECT_EQ(recorder_.live, 3);
}

TEST_F(CoordinatorManagerObserverTest,
       ALiveMemberReplacedByItsNewIncarnationCountsAsProcessExited) {
  Make();
  ReadyCluster();
  JoinRequestInfo again;
  again.rank = 1;
  again.identity = "pod-1";
  again.peer_address = "127.0.0.1:9101";
  again.incarnation = "i2";  // The same pod, restarted.
  ASSERT_TRUE(manager_->Join(again).ok());
  EXPECT_EQ(recorder_.failures,
            (std::map<std::string, int>{{"process_exited", 1}}));
  EXPECT_EQ(recorder_.live, 4);
}

TEST_F(CoordinatorManagerObserverTest, AGracefulLeaveIsNoFailure) {
  Make();
  std::vector<JoinOutcome> joined = ReadyCluster();
  ASSERT_TRUE(manager_->Leave(3, joined[3].lease_token, "SIGTERM").ok());
  EXPECT_TRUE(recorder_.failures.empty());
  EXPECT_EQ(recorder_.live, 3);
  EXPECT_FALSE(recorder_.epochs.back().second);
}

TEST_F(CoordinatorManagerObserverTest,
       RecoveryPhasesFollowTheReplacementFromJoinToTheReadyEpoch) {
  Make();
  std::vector<JoinOutcome> joined = ReadyCluster();
  // Rank 1 falls silent; its lease runs out 1500 ms after its last
  // heartbeat, and its replacement joins 2000 ms later.
  Pass(absl::Milliseconds(1500), joined, {0, 2, 3});
  ASSERT_EQ(recorder_.failures,
            (std::map<std::string, int>{{"lease_expired", 1}}));
  Pass(absl::Milliseconds(2000), joined, {0, 2, 3});
  joined[1] = Replace(1);
  EXPECT_EQ(recorder_.recoveries_started, 1);
  EXPECT_TRUE(recorder_.phases.empty());
  // The survivors' communicators (with the replacement's) are up after
  // 300 ms; the replacement copies its shard and is READY 700 ms later.
  clock_->Advance(absl::Milliseconds(300));
  ReportReady(joined, {0, 2, 3});
  EXPECT_EQ(recorder_.recoveries_completed, 0);
  clock_->Advance(absl::Milliseconds(700));
  ReportReady(joined, {1});
  ASSERT_TRUE(manager_->Snapshot().ready);
  EXPECT_EQ(recorder_.recoveries_started, 1);
  EXPECT_EQ(recorder_.recoveries_completed, 1);
  EXPECT_EQ(PhasesMs(), (std::map<std::string, int64_t>{
                            {"detection", 1500},
                            {"awaiting_replacement", 2000},
                            {"rendezvous", 300},
                            {"transfer", 700},
                            {"total", 4500},
                        }));
}

TEST_F(CoordinatorManagerObserverTest,
       ANewIncarnationsDetectionStartsAtTheOldProcessLastHeartbeat) {
  Make();
  std::vector<JoinOutcome> joined = ReadyCluster();
  // Rank 1's process dies; its replacement joins before the lease runs
  // out, 800 ms after the old process's last heartbeat.
  Pass(absl::Milliseconds(800), joined, {0, 2, 3});
  joined[1] = Replace(1);
  ASSERT_EQ(recorder_.failures,
            (std::map<std::string, int>{{"process_exited", 1}}));
  clock_->Advance(absl::Milliseconds(100));
  ReportReady(joined, {0, 2, 3});
  clock_->Advance(absl::Milliseconds(200));
  ReportReady(joined, {1});
  ASSERT_TRUE(manager_->Snapshot().ready);
  EXPECT_EQ(recorder_.recoveries_completed, 1);
  EXPECT_EQ(PhasesMs(), (std::map<std::string, int64_t>{
                            {"detection", 800},
                            {"awaiting_replacement", 0},
                            {"rendezvous", 100},
                            {"transfer", 200},
                            {"total", 1100},
                        }));
}

TEST_F(CoordinatorManagerObserverTest,
       ASurvivorReadyLastEndsTheRendezvousWithTheEpoch) {
  Make();
  std::vector<JoinOutcome> joined = ReadyCluster();
  Pass(absl::Milliseconds(500), joined, {0, 2, 3});
  joined[1] = Replace(1);
  clock_->Advance(absl::Milliseconds(100));
  ReportReady(joined, {1, 0, 2});
  clock_->Advance(absl::Milliseconds(100));
  ReportReady(joined, {3});
  ASSERT_TRUE(manager_->Snapshot().ready);
  EXPECT_EQ(PhasesMs(), (std::map<std::string, int64_t>{
                            {"detection", 500},
                            {"awaiting_replacement", 0},
                            {"rendezvous", 200},
                            {"transfer", 0},
                            {"total", 700},
                        }));
}

// The manager's lease timer did not run for 5 s (the coordinator stopped):
// every lease ran out unread; nobody is removed, the observer hears of the
// stall once, and the job stays ready.
TEST_F(CoordinatorManagerObserverTest, StalledCoordinatorRemovesNobody) {
  check_period_ = absl::Milliseconds(375);
  Make();
  const std::vector<JoinOutcome> joined = ReadyCluster();
  manager_->Tick();
  const int64_t epoch = manager_->Snapshot().epoch;
  clock_->Advance(absl::Seconds(5));
  manager_->Tick();
  EXPECT_EQ(manager_->Snapshot().epoch, epoch);
  EXPECT_TRUE(manager_->Snapshot().ready);
  {
    absl::MutexLock lock(&recorder_.mu_);
    EXPECT_EQ(recorder_.stalls, 1);
    EXPECT_TRUE(recorder_.failures.empty());
  }
  // The members' heartbeats, read now, keep them; the timer runs again.
  Pass(absl::Seconds(3), joined, {0, 1, 2, 3});
  EXPECT_EQ(manager_->Snapshot().epoch, epoch);
  absl::MutexLock lock(&recorder_.mu_);
  EXPECT_EQ(recorder_.stalls, 1);
}

// The same stall, but the queued heartbeats are served before the lease
// timer runs again (the threads race as the process resumes): the first
// heartbeat checks the leases itself, so the stall is seen and counted
// whichever runs first, and nobody is removed at the next tick either.
TEST_F(CoordinatorManagerObserverTest, AStallIsSeenWhenAHeartbeatRunsFirst) {
  check_period_ = absl::Milliseconds(375);
  Make();
  const std::vector<JoinOutcome> joined = ReadyCluster();
  manager_->Tick();
  const int64_t epoch = manager_->Snapshot().epoch;
  clock_->Advance(absl::Seconds(5));
  ReportReady(joined, {0, 1, 2, 3});  // Before any Tick.
  {
    absl::MutexLock lock(&recorder_.mu_);
    EXPECT_EQ(recorder_.stalls, 1);
  }
  manager_->Tick();
  EXPECT_EQ(manager_->Snapshot().epoch, epoch);
  EXPECT_TRUE(manager_->Snapshot().ready);
  absl::MutexLock lock(&recorder_.mu_);
  EXPECT_EQ(recorder_.stalls, 1);
  EXPECT_TRUE(recorder_.failures.empty());
}

}  // namespace
}  // namespace shardd::coordinator
