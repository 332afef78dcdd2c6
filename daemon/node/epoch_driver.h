#ifndef SHARDD_DAEMON_NODE_EPOCH_DRIVER_H_
#define SHARDD_DAEMON_NODE_EPOCH_DRIVER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/membership_view.h"
#include "daemon/core/clock.h"
#include "daemon/node/epoch_plan.h"
#include "daemon/node/membership.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {

// What the epoch driver asks of the node to carry out an EpochPlan: one
// method per EpochAction kind, and where each outcome is recorded. The
// node (NodeManager) implements it; tests record the calls.
class EpochActions {
 public:
  virtual ~EpochActions() = default;

  virtual LocalEpochState Local() = 0;
  virtual int64_t CommittedStep() = 0;
  virtual void NoteEpochChanged(const coordinator::MembershipView& view,
                                int64_t previous_epoch) = 0;
  virtual void SupersedeCommunicators(int64_t epoch,
                                      const std::string& why) = 0;
  virtual void AdoptTopology(int world_size, int sharding_factor) = 0;
  virtual void SettleInDoubtStep(const coordinator::MembershipView& view,
                                 std::optional<int64_t> rollback_step) = 0;
  virtual void AbandonCheckpointsAbove(int64_t step) = 0;
  // OK: the node holds the checkpoint's state of `step`.
  virtual absl::Status RestoreCheckpoint(int64_t step, int64_t epoch) = 0;
  // The checkpoint of `step` could not be restored: the coordinator must
  // not plan with it again.
  virtual void NoteBadCheckpoint(int64_t step, const absl::Status& why) = 0;
  virtual void PrepareEngine(const v1::ShardTransfer& copy, int world_size,
                             int sharding_factor) = 0;
  virtual absl::Status BuildCommunicators(int64_t epoch, int world_size,
                                          int sharding_factor) = 0;
  virtual void MarkCommunicatorsFailed(const std::string& why) = 0;
  virtual absl::Status CopyShard(int64_t epoch,
                                 const v1::ShardTransfer& copy) = 0;
  // A restore or copy of this epoch finished (done) or failed (`error`).
  virtual void NoteRecoveryDone() = 0;
  virtual void NoteRecoveryError(const std::string& error) = 0;
  // Before READY is reported in `epoch`: the node publishes in the epoch's
  // store what ranks may look for there that an earlier epoch's store held:
  // the agreement of the model it holds (ModelRegistration::PublishHeld),
  // for ranks registering the model in this epoch; as rank 0, its last
  // FULL export's outcome (ExportRendezvous::PublishOutcome).
  virtual void PublishHeld(int64_t epoch) = 0;
  // READY was reported (`reported`: the coordinator heard it) at `step`.
  virtual void NoteReady(int64_t epoch, int64_t step, bool reported) = 0;
  // The job failed (terminal); called once.
  virtual void NoteJobFailed(const absl::Status& why) = 0;
};

struct EpochDriverOptions {
  // How long one wait for a new view lasts before Stop is looked at again.
  absl::Duration poll = absl::Milliseconds(100);
  // How long the driver rests after the membership answered an error.
  absl::Duration retry_after_error = absl::Milliseconds(100);
};

// Follows the membership and carries out, for every view, the plan
// PlanEpoch decides: notes epoch changes, aborts superseded communicators,
// settles in-doubt steps, restores checkpoints, builds communicators,
// copies a replacement's shard and reports READY, handling each failure
// the way the coordinator expects (a failed restore marks the checkpoint
// bad and is reported; failed communicators are reported without a
// suspect; a failed copy waits for the next epoch).
//
// Thread-safety: Run is called by one thread (the node's epoch thread);
// Stop from any. HandleView is for that thread or for tests. Not owned:
// `membership`, `actions` and `clock` outlive the driver.
class EpochDriver {
 public:
  EpochDriver(Membership* membership, EpochActions* actions, Clock* clock,
              EpochDriverOptions options = {});

  // Waits for views and handles them until Stop.
  void Run();
  // Run returns within one poll; a driver once stopped stays stopped.
  void Stop();
  bool stopped() const;

  // One wait for a view (up to the poll interval) and what follows.
  void RunOnce();
  // Plans and performs `view` as Run does; the plan it performed.
  EpochPlan HandleView(const coordinator::MembershipView& view);
  // The wait's error (no view): DATA_LOSS is the job's end, told once.
  void HandleError(const absl::Status& status);

  EpochCursor cursor() const { return cursor_; }

 private:
  // Performs `plan` for `view`; stops at the first failure.
  void Perform(const coordinator::MembershipView& view, const EpochPlan& plan,
               const LocalEpochState& local);
  // Between actions: false once stopped (the rest is not done).
  bool Restore(const coordinator::MembershipView& view, int64_t step);
  bool Build(const coordinator::MembershipView& view, const EpochPlan& plan,
             bool prepare_copy);
  bool Copy(const coordinator::MembershipView& view, const EpochPlan& plan);
  void Ready(const coordinator::MembershipView& view);

  Membership* const membership_;
  EpochActions* const actions_;
  Clock* const clock_;
  const EpochDriverOptions options_;
  EpochCursor cursor_;  // Only the running thread.
  bool job_failed_ = false;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EPOCH_DRIVER_H_
