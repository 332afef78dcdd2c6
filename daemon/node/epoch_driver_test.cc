#include "daemon/node/epoch_driver.h"

#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/manual_clock.h"
#include "daemon/node/testing/fake_membership.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

constexpr int kRank = 1;
constexpr char kMe[] = "me";

// A membership whose views the test scripts: WaitFor answers the next
// scripted result (or DEADLINE_EXCEEDED when none is left) and records the
// deadline it was given; what the node tells the coordinator is recorded
// (testing::FakeMembership).
class ScriptedMembership : public testing::FakeMembership {
 public:
  ScriptedMembership() : FakeMembership(kRank, kMe) {}

  absl::StatusOr<coordinator::MembershipView> WaitFor(
      std::function<bool(const coordinator::MembershipView&)> predicate,
      MonoTime deadline) const override {
    absl::MutexLock lock(&mu_);
    deadlines_.push_back(deadline);
    while (!script_.empty()) {
      absl::StatusOr<coordinator::MembershipView> next = script_.front();
      script_.pop_front();
      if (!next.ok()) return next.status();
      view_ = *next;
      if (predicate(*next)) return next;
    }
    return absl::DeadlineExceededError("no view");
  }

  void Script(absl::StatusOr<coordinator::MembershipView> next) {
    absl::MutexLock lock(&mu_);
    script_.push_back(std::move(next));
  }
  std::vector<MonoTime> deadlines() const {
    absl::MutexLock lock(&mu_);
    return deadlines_;
  }

 private:
  mutable std::deque<absl::StatusOr<coordinator::MembershipView>> script_
      ABSL_GUARDED_BY(mu_);
  mutable std::vector<MonoTime> deadlines_ ABSL_GUARDED_BY(mu_);
};

// The node side: records every call in order (in the membership's log, so
// that the order against READY and reports shows) and fails what the test
// says.
class RecordingActions : public EpochActions {
 public:
  explicit RecordingActions(ScriptedMembership* log) : log_(log) {}

  LocalEpochState Local() override { return local_; }
  int64_t CommittedStep() override { return step_; }
  void NoteEpochChanged(const coordinator::MembershipView& view,
                        int64_t previous) override {
    log_->Log(absl::StrCat("epoch_changed(", previous, "->", view.epoch, ")"));
  }
  void SupersedeCommunicators(int64_t epoch, const std::string&) override {
    log_->Log(absl::StrCat("supersede(", epoch, ")"));
  }
  void AdoptTopology(int w, int f) override {
    log_->Log(absl::StrCat("topology(", w, ",", f, ")"));
  }
  void SettleInDoubtStep(const coordinator::MembershipView&,
                         std::optional<int64_t> rollback) override {
    log_->Log(rollback.has_value()
                  ? absl::StrCat("settle(rollback ", *rollback, ")")
                  : "settle");
  }
  void AbandonCheckpointsAbove(int64_t step) override {
    log_->Log(absl::StrCat("abandon_above(", step, ")"));
  }
  absl::Status RestoreCheckpoint(int64_t step, int64_t epoch) override {
    log_->Log(absl::StrCat("restore(", step, ",", epoch, ")"));
    if (restore_status_.ok()) {
      local_.holds_engine = true;
      step_ = step;
    }
    return restore_status_;
  }
  void NoteBadCheckpoint(int64_t step, const absl::Status&) override {
    log_->Log(absl::StrCat("bad_checkpoint(", step, ")"));
  }
  void PrepareEngine(const v1::ShardTransfer& copy, int, int) override {
    // On its own thread, while the communicators form.
    absl::MutexLock lock(&mu_);
    prepared_from_ = copy.source_ranks(0);
    prepare_thread_ = std::this_thread::get_id();
  }
  absl::Status BuildCommunicators(int64_t epoch, int w, int f) override {
    log_->Log(absl::StrCat("build(", epoch, ",", w, ",", f, ")"));
    if (build_status_.ok()) local_.comm_epoch = epoch;
    return build_status_;
  }
  void MarkCommunicatorsFailed(const std::string&) override {
    log_->Log("comm_failed");
  }
  absl::Status CopyShard(int64_t epoch, const v1::ShardTransfer&) override {
    log_->Log(absl::StrCat("copy(", epoch, ")"));
    if (copy_status_.ok()) {
      local_.holds_engine = true;
      step_ = copied_step_;
    }
    return copy_status_;
  }
  void NoteRecoveryDone() override { log_->Log("recovery_done"); }
  void NoteRecoveryError(const std::string& error) override {
    log_->Log("recovery_error");
    recovery_error_ = error;
  }
  void PublishHeld(int64_t epoch) override {
    log_->Log(absl::StrCat("publish(", epoch, ")"));
  }
  void NoteReady(int64_t epoch, int64_t step, bool reported) override {
    log_->Log(
        absl::StrCat("note_ready(", epoch, ",", step, ",", reported, ")"));
  }
  void NoteJobFailed(const absl::Status& why) override {
    log_->Log(absl::StrCat("job_failed(", why.message(), ")"));
  }

  int prepared_from() {
    absl::MutexLock lock(&mu_);
    return prepared_from_;
  }
  std::thread::id prepare_thread() {
    absl::MutexLock lock(&mu_);
    return prepare_thread_;
  }

  LocalEpochState local_;
  int64_t step_ = 0;
  int64_t copied_step_ = 0;
  absl::Status restore_status_;
  absl::Status build_status_;
  absl::Status copy_status_;
  std::string recovery_error_;

 private:
  ScriptedMembership* const log_;
  absl::Mutex mu_;
  int prepared_from_ ABSL_GUARDED_BY(mu_) = -1;
  std::thread::id prepare_thread_ ABSL_GUARDED_BY(mu_);
};

coordinator::MembershipView View(int64_t epoch, int live = 4,
                                 const std::string& holder = kMe) {
  coordinator::MembershipView view;
  view.epoch = epoch;
  view.world_size = 4;
  view.sharding_factor = 2;
  for (int r = 0; r < live; ++r) {
    v1::MemberInfo m;
    m.set_rank(r);
    m.set_incarnation(r == kRank ? holder : absl::StrCat("other-", r));
    view.members.push_back(m);
  }
  return view;
}

coordinator::MembershipView Planned(int64_t epoch, v1::EpochPlanKind kind,
                                    int64_t step) {
  coordinator::MembershipView view = View(epoch);
  view.plan.set_epoch(epoch);
  view.plan.set_kind(kind);
  view.plan.set_step(step);
  return view;
}

class EpochDriverTest : public ::testing::Test {
 protected:
  EpochDriverTest() : actions_(&membership_) {}

  std::string Calls() const { return absl::StrJoin(membership_.calls(), " "); }

  ScriptedMembership membership_;
  RecordingActions actions_;
  ManualClock clock_;
  EpochDriver driver_{&membership_, &actions_, &clock_};
};

TEST_F(EpochDriverTest, NewJobBuildsCommunicatorsThenReportsReady) {
  const coordinator::MembershipView view =
      Planned(1, v1::EPOCH_PLAN_KIND_NEW, 0);
  membership_.SetView(view);
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(0->1) supersede(1) topology(4,2) settle "
            "build(1,4,2) publish(1) ready(1,0) note_ready(1,0,1)");
  EXPECT_EQ(driver_.cursor(), (EpochCursor{1, 1}));
}

TEST_F(EpochDriverTest, ReattachReportsTheStepItHolds) {
  actions_.local_ = {.comm_epoch = 3, .holds_engine = true};
  actions_.step_ = 12;
  const coordinator::MembershipView view =
      Planned(4, v1::EPOCH_PLAN_KIND_RESUME, 12);
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(3->4) supersede(4) topology(4,2) settle "
            "build(4,4,2) publish(4) ready(4,12) note_ready(4,12,1)");
}

TEST_F(EpochDriverTest, FailedRendezvousIsReportedWithoutASuspect) {
  actions_.build_status_ = absl::UnavailableError("peer 2 unreachable");
  const coordinator::MembershipView view =
      Planned(2, v1::EPOCH_PLAN_KIND_RESUME, 5);
  membership_.SetView(view);
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(0->2) supersede(2) topology(4,2) settle "
            "build(2,4,2) comm_failed "
            "report(-1,FAILURE_KIND_PEER_UNREACHABLE,2)");
  EXPECT_NE(membership_.last_detail().find("peer 2 unreachable"),
            std::string::npos);
}

TEST_F(EpochDriverTest, FailedRendezvousOfASupersededEpochIsNotReported) {
  actions_.build_status_ = absl::UnavailableError("peer 2 unreachable");
  membership_.SetView(View(3));  // The coordinator moved on meanwhile.
  driver_.HandleView(Planned(2, v1::EPOCH_PLAN_KIND_RESUME, 5));
  EXPECT_EQ(Calls(),
            "epoch_changed(0->2) supersede(2) topology(4,2) settle "
            "build(2,4,2) comm_failed");
}

TEST_F(EpochDriverTest, ReplicaCopyPreparesTheEngineWhileBuildingThenCopies) {
  coordinator::MembershipView view = Planned(8, v1::EPOCH_PLAN_KIND_RESUME, 30);
  v1::ShardTransfer* t = view.plan.add_transfers();
  t->set_target_rank(kRank);
  t->add_source_ranks(3);
  actions_.copied_step_ = 30;
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(0->8) supersede(8) topology(4,2) settle "
            "build(8,4,2) copy(8) publish(8) ready(8,30) note_ready(8,30,1)");
  EXPECT_EQ(actions_.prepared_from(), 3);
  EXPECT_NE(actions_.prepare_thread(), std::this_thread::get_id());
}

TEST_F(EpochDriverTest, FailedCopyRecordsTheErrorAndStaysUnready) {
  coordinator::MembershipView view = Planned(8, v1::EPOCH_PLAN_KIND_RESUME, 30);
  v1::ShardTransfer* t = view.plan.add_transfers();
  t->set_target_rank(kRank);
  t->add_source_ranks(3);
  actions_.copy_status_ = absl::DataLossError("piece 4: CRC mismatch");
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(0->8) supersede(8) topology(4,2) settle "
            "build(8,4,2) copy(8) recovery_error");
  EXPECT_NE(actions_.recovery_error_.find("CRC mismatch"), std::string::npos);
}

TEST_F(EpochDriverTest, CheckpointRestoreBeforeCommunicatorsThenReady) {
  coordinator::MembershipView view =
      Planned(11, v1::EPOCH_PLAN_KIND_ROLLBACK, 40);
  view.plan.add_restore_ranks(kRank);
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(0->11) supersede(11) topology(4,2) "
            "settle(rollback 40) abandon_above(40) restore(40,11) "
            "recovery_done build(11,4,2) publish(11) ready(11,40) "
            "note_ready(11,40,1)");
}

TEST_F(EpochDriverTest, FailedRestoreMarksItBadHeartbeatsThenReports) {
  actions_.restore_status_ = absl::DataLossError("step-40: bad CRC");
  coordinator::MembershipView view =
      Planned(11, v1::EPOCH_PLAN_KIND_ROLLBACK, 40);
  view.plan.add_restore_ranks(kRank);
  membership_.SetView(view);
  driver_.HandleView(view);
  // The coordinator hears of the bad checkpoint (heartbeat) before the
  // report that starts the next epoch's planning.
  EXPECT_EQ(Calls(),
            "epoch_changed(0->11) supersede(11) topology(4,2) "
            "settle(rollback 40) abandon_above(40) restore(40,11) "
            "recovery_error bad_checkpoint(40) heartbeat "
            "report(-1,FAILURE_KIND_TRANSFER_FAILED,11)");
  EXPECT_NE(actions_.recovery_error_.find(
                "rollback to the checkpoint of step 40 failed"),
            std::string::npos);
}

TEST_F(EpochDriverTest, InDoubtRollbackToAHeldStepPassesTheStep) {
  actions_.local_ = {.comm_epoch = 10, .holds_engine = true};
  actions_.step_ = 40;
  coordinator::MembershipView view =
      Planned(11, v1::EPOCH_PLAN_KIND_ROLLBACK, 40);
  view.plan.add_restore_ranks(0);
  driver_.HandleView(view);
  EXPECT_EQ(Calls(),
            "epoch_changed(10->11) supersede(11) topology(4,2) "
            "settle(rollback 40) abandon_above(40) build(11,4,2) "
            "publish(11) ready(11,40) note_ready(11,40,1)");
}

TEST_F(EpochDriverTest, RemovedMemberAbortsItsEpochAndBuildsNothing) {
  actions_.local_ = {.comm_epoch = 5, .holds_engine = true};
  coordinator::MembershipView view = View(6, 4, "successor");
  view.plan.set_epoch(6);
  view.plan.set_kind(v1::EPOCH_PLAN_KIND_RESUME);
  driver_.HandleView(view);
  EXPECT_EQ(Calls(), "epoch_changed(5->6) supersede(6)");
  // Later views of the same epoch are not acted on either.
  driver_.HandleView(view);
  EXPECT_EQ(Calls(), "epoch_changed(5->6) supersede(6)");
}

TEST_F(EpochDriverTest, UnreportedReadyIsNotedAsSuch) {
  membership_.SetReadyStatus(absl::UnavailableError("coordinator restarting"));
  driver_.HandleView(Planned(1, v1::EPOCH_PLAN_KIND_NEW, 0));
  EXPECT_NE(Calls().find("publish(1) ready(1,0) note_ready(1,0,0)"),
            std::string::npos)
      << Calls();
}

TEST_F(EpochDriverTest, RunOnceWaitsUntilTheClocksPollDeadline) {
  driver_.RunOnce();  // Nothing scripted: DEADLINE_EXCEEDED, nothing done.
  ASSERT_EQ(membership_.deadlines().size(), 1u);
  EXPECT_EQ(membership_.deadlines()[0],
            clock_.MonotonicNow() + EpochDriverOptions().poll);
  EXPECT_EQ(Calls(), "");
}

TEST_F(EpochDriverTest, RunOnceSkipsViewsItHasNoUseFor) {
  membership_.Script(View(2, 3));  // Seen: the change is noted.
  membership_.Script(View(2, 3));  // Nothing new.
  membership_.Script(Planned(2, v1::EPOCH_PLAN_KIND_NEW, 0));
  driver_.RunOnce();
  driver_.RunOnce();
  EXPECT_EQ(Calls(),
            "epoch_changed(0->2) supersede(2) topology(4,2) settle "
            "build(2,4,2) publish(2) ready(2,0) note_ready(2,0,1)");
}

TEST_F(EpochDriverTest, JobFailureIsToldOnce) {
  membership_.Script(absl::DataLossError("job failed: shard 1 lost"));
  membership_.Script(absl::DataLossError("job failed: shard 1 lost"));
  membership_.Script(absl::FailedPreconditionError("left"));
  driver_.RunOnce();
  driver_.RunOnce();
  driver_.RunOnce();
  EXPECT_EQ(Calls(), "job_failed(job failed: shard 1 lost)");
}

// The daemon stopped (SIGTERM after the job failed) while its epoch thread
// was busy: the failure it never waited for is noted as Run ends.
TEST_F(EpochDriverTest, AJobFailureNotYetNotedIsNotedWhenRunStops) {
  coordinator::MembershipView failed = View(5);
  failed.error = absl::DataLossError("job failed: no progress");
  membership_.SetView(failed);
  driver_.Stop();
  driver_.Run();
  EXPECT_EQ(Calls(), "job_failed(job failed: no progress)");
}

TEST_F(EpochDriverTest, AJobFailureAlreadyNotedIsNotNotedAgainWhenRunStops) {
  membership_.Script(absl::DataLossError("job failed: shard 1 lost"));
  driver_.RunOnce();
  coordinator::MembershipView failed = View(5);
  failed.error = absl::DataLossError("job failed: shard 1 lost");
  membership_.SetView(failed);
  driver_.Stop();
  driver_.Run();
  EXPECT_EQ(Calls(), "job_failed(job failed: shard 1 lost)");
}

TEST_F(EpochDriverTest, StoppingWithoutAJobFailureNotesNone) {
  membership_.SetView(View(5));
  driver_.Stop();
  driver_.Run();
  EXPECT_EQ(Calls(), "");
}

TEST_F(EpochDriverTest, StopEndsRunFromAnotherThread) {
  std::thread stopper([this] { driver_.Stop(); });
  driver_.Run();  // Returns once stopped (each wait ends at its deadline).
  stopper.join();
  EXPECT_TRUE(driver_.stopped());
}

}  // namespace
}  // namespace shardd::node
