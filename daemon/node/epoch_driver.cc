#include "daemon/node/epoch_driver.h"

#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {

EpochDriver::EpochDriver(Membership* membership, EpochActions* actions,
                         Clock* clock, EpochDriverOptions options)
    : membership_(membership),
      actions_(actions),
      clock_(clock),
      options_(options) {}

void EpochDriver::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

bool EpochDriver::stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void EpochDriver::Run() {
  while (!stopped()) RunOnce();
  // The daemon stops when the job failed (it exits 3), and it may have
  // been busy with an epoch (building its communicators, copying) when the
  // failure came: the failure is still noted, once, so that its commit log
  // ends with the final record and its trainer hears why.
  HandleError(membership_->view().error);
}

void EpochDriver::RunOnce() {
  const EpochCursor cursor = cursor_;
  absl::StatusOr<coordinator::MembershipView> view = membership_->WaitFor(
      [cursor](const coordinator::MembershipView& v) {
        return WantsView(v, cursor);
      },
      clock_->MonotonicNow() + options_.poll);
  if (absl::IsDeadlineExceeded(view.status())) return;
  if (!view.ok()) {
    HandleError(view.status());
    // The membership answers errors at once: rest (or stop) before asking
    // again. AwaitUntil, not AwaitWithTimeout: Abseil's timed waits use a
    // wall-clock deadline, which a clock step stretches (deadline_waker.h).
    absl::MutexLock lock(&mu_);
    AwaitUntil(&mu_, absl::Condition(&stop_),
               MonoNow() + options_.retry_after_error);
    return;
  }
  HandleView(*view);
}

void EpochDriver::HandleError(const absl::Status& status) {
  if (absl::IsDataLoss(status) && !job_failed_) {
    // Terminal: no epoch follows. Collectives in flight return now, and
    // trainers hear why (WatchEvents, and DATA_LOSS from every call).
    job_failed_ = true;
    actions_->NoteJobFailed(status);
  }
}

EpochPlan EpochDriver::HandleView(const coordinator::MembershipView& view) {
  const LocalEpochState local = actions_->Local();
  const EpochPlan plan = PlanEpoch(view, membership_->rank(),
                                   membership_->incarnation(), cursor_, local);
  cursor_ = plan.next;
  Perform(view, plan, local);
  return plan;
}

void EpochDriver::Perform(const coordinator::MembershipView& view,
                          const EpochPlan& plan, const LocalEpochState& local) {
  using Kind = EpochAction::Kind;
  for (const EpochAction& action : plan.actions) {
    switch (action.kind) {
      case Kind::kNoteEpochChanged:
        actions_->NoteEpochChanged(view, local.comm_epoch);
        break;
      case Kind::kSupersedeCommunicators:
        actions_->SupersedeCommunicators(view.epoch, action.why);
        break;
      case Kind::kAdoptTopology:
        actions_->AdoptTopology(view.world_size, view.sharding_factor);
        break;
      case Kind::kSettleInDoubtStep:
        actions_->SettleInDoubtStep(
            view, action.rollback ? std::optional<int64_t>(action.step)
                                  : std::nullopt);
        break;
      case Kind::kAbandonCheckpointsAbove:
        actions_->AbandonCheckpointsAbove(action.step);
        break;
      case Kind::kRestoreCheckpoint:
        if (!Restore(view, action.step)) return;
        break;
      case Kind::kBuildCommunicators:
        if (plan.copy_refused_holds_engine) {
          std::fprintf(stderr,
                       "shardd rank %d: epoch %lld plans a copy of step %lld "
                       "but this daemon holds step %lld\n",
                       membership_->rank(), static_cast<long long>(view.epoch),
                       static_cast<long long>(view.plan.step()),
                       static_cast<long long>(actions_->CommittedStep()));
        }
        if (!Build(view, plan, action.prepare_copy)) return;
        break;
      case Kind::kCopyShard:
        if (!Copy(view, plan)) return;
        break;
      case Kind::kReportReady:
        Ready(view);
        break;
    }
  }
}

bool EpochDriver::Restore(const coordinator::MembershipView& view,
                          int64_t step) {
  SHARDD_FAILPOINT("recovery.before_install");
  const absl::Status restored = actions_->RestoreCheckpoint(step, view.epoch);
  if (restored.ok()) {
    actions_->NoteRecoveryDone();
    return true;
  }
  const std::string why = absl::StrCat("epoch ", view.epoch,
                                       ": rollback to the checkpoint of step ",
                                       step, " failed: ", restored.ToString());
  actions_->NoteRecoveryError(why);
  std::fprintf(stderr, "shardd: %s\n", why.c_str());
  // The coordinator plans again without that checkpoint: it must hear of
  // it (the heartbeat) before the next epoch is planned.
  actions_->NoteBadCheckpoint(step, restored);
  (void)membership_->SendHeartbeat();
  if (membership_->view().epoch == view.epoch) {
    (void)membership_->ReportFailure(-1, v1::FAILURE_KIND_TRANSFER_FAILED, why,
                                     view.epoch);
  }
  return false;
}

bool EpochDriver::Build(const coordinator::MembershipView& view,
                        const EpochPlan& plan, bool prepare_copy) {
  std::thread prepare;
  if (prepare_copy && plan.copy.has_value()) {
    prepare = std::thread([this, copy = *plan.copy, world = view.world_size,
                           factor = view.sharding_factor] {
      actions_->PrepareEngine(copy, world, factor);
    });
  }
  const absl::Status built = actions_->BuildCommunicators(
      view.epoch, view.world_size, view.sharding_factor);
  if (prepare.joinable()) prepare.join();
  if (built.ok()) return true;
  const std::string why =
      absl::StrCat("epoch ", view.epoch, ": communicators: ", built.ToString());
  actions_->MarkCommunicatorsFailed(why);
  // Nobody's lease runs out when communicators cannot be formed (a peer
  // unreachable, a transient connect or store error): unreported, the job
  // would sit un-ready in this epoch for good. Reported, every member
  // builds them again in the next one; no suspect is named, so nobody is
  // removed for it (a dead peer's lease runs out on its own). A newer epoch
  // under way makes the report stale, and it is dropped.
  if (membership_->view().epoch == view.epoch) {
    (void)membership_->ReportFailure(-1, v1::FAILURE_KIND_PEER_UNREACHABLE, why,
                                     view.epoch);
  }
  return false;
}

bool EpochDriver::Copy(const coordinator::MembershipView& view,
                       const EpochPlan& plan) {
  SHARDD_FAILPOINT("recovery.before_install");
  const absl::Status copied = actions_->CopyShard(view.epoch, *plan.copy);
  if (!copied.ok()) {
    actions_->NoteRecoveryError(copied.ToString());
    std::fprintf(stderr, "shardd: recovery in epoch %lld failed: %s\n",
                 static_cast<long long>(view.epoch), copied.ToString().c_str());
    return false;
  }
  SHARDD_FAILPOINT("recovery.before_ready");
  return true;
}

void EpochDriver::Ready(const coordinator::MembershipView& view) {
  const int64_t step = actions_->CommittedStep();
  // Before READY: a rank registering the model (or retrying an export) in
  // this epoch waits for the epoch to be ready, and then finds it there.
  actions_->PublishHeld(view.epoch);
  // A failed READY heartbeat is retried by the next epoch.
  const bool reported = membership_->SetReady(view.epoch, step).ok();
  actions_->NoteReady(view.epoch, step, reported);
}

}  // namespace shardd::node
