#ifndef SHARDD_DAEMON_NODE_TRAINER_OPS_H_
#define SHARDD_DAEMON_NODE_TRAINER_OPS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/membership.h"
#include "daemon/node/step_engine.h"
#include "daemon/node/step_ledger.h"
#include "daemon/node/trainer_presence.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// What the trainer operations need of the node they run on (NodeManager
// implements it): the engine, the epoch whose communicators an operation
// uses, the mapping of a failed collective, and a commit's side effects.
// Methods may take the node's mutex; TrainerOps calls them without holding
// its own.
class TrainerOpsHost {
 public:
  virtual ~TrainerOpsHost() = default;
  // The registered engine, or FAILED_PRECONDITION naming RegisterModel.
  virtual absl::StatusOr<std::shared_ptr<StepEngine>> Engine() = 0;
  // When the node is in a ready epoch: that epoch, recorded as the one
  // whose collectives the operation is about to issue. Otherwise ABORTED
  // saying why (the communicators' error, when they failed).
  virtual absl::StatusOr<int64_t> EnterReadyEpoch() = 0;
  // The epoch of the node's current communicators (reported in responses).
  virtual int64_t CurrentEpoch() = 0;
  // A collective of the operation failed with `status`: the node abandons
  // the epoch and the trainer gets ABORTED; other statuses pass through.
  virtual absl::Status OnCollectiveError(absl::string_view what,
                                         absl::Status status) = 0;
  // The registered model's fingerprint (part of every commit vote).
  virtual uint64_t ModelFingerprint() = 0;
  // `result` was committed on `engine` in `epoch`: commit log, events,
  // checkpoints, metrics.
  virtual void Committed(StepEngine& engine, const StepResult& result,
                         int64_t epoch, absl::Duration took) = 0;
};

struct TrainerOpsOptions {
  // Votes on every step (ShouldCommit) and names this rank. Not owned;
  // must outlive the TrainerOps.
  Membership* membership = nullptr;
  // Not owned; must outlive the TrainerOps.
  TrainerOpsHost* host = nullptr;
  // Told about prefetch hints and aborted step attempts. Optional; not
  // owned.
  metrics::NodeObserver* observer = nullptr;
  // Bounds every collective an operation issues (collectives are matched
  // across ranks, so they run to it even when a caller's deadline is
  // shorter).
  absl::Duration collective_timeout = absl::Seconds(30);
  // The PCI bus id of the device a CUDA IPC reference names (empty on the
  // CPU backend).
  std::string pci_bus_id;
  // Told of every registration and call (what the heartbeats report of the
  // trainer). Optional; not owned.
  TrainerPresence* presence = nullptr;
};

// The Trainer protocol's step operations: Gather, Release, ReduceGrad and
// Step, validated against the StepLedger (which it owns) and carried out
// on the engine the host holds. It owns the per-operation lock that
// serialises trainer operations (one trainer per daemon); the node takes it
// too for what must not interleave with a step (registration, export,
// serving or restoring a shard).
//
// Thread-safe. Lock order: op_mutex() before the host's mutex before this
// class's own; the node may call NewEpoch, EngineInstalled, HeldUnits and
// CountAbort while it holds its mutex.
class TrainerOps {
 public:
  explicit TrainerOps(TrainerOpsOptions options);

  // `attachment`: the caller's RegisterModelResponse.attachment, when it
  // sent one; a superseded one is refused (CheckAttachment).
  absl::StatusOr<v1::GatherResponse> Gather(
      const v1::GatherRequest& request, MonoTime deadline,
      std::optional<uint64_t> attachment = std::nullopt);
  absl::StatusOr<v1::ReleaseResponse> Release(
      const v1::ReleaseRequest& request,
      std::optional<uint64_t> attachment = std::nullopt);
  absl::StatusOr<v1::ReduceGradResponse> ReduceGrad(
      const v1::ReduceGradRequest& request, MonoTime deadline,
      std::optional<uint64_t> attachment = std::nullopt);
  absl::StatusOr<v1::StepResponse> Step(
      const v1::StepRequest& request, MonoTime deadline,
      std::optional<uint64_t> attachment = std::nullopt);

  // A trainer process registered (or re-attached): its attachment, new and
  // never 0; every earlier one is superseded from now on.
  uint64_t NewAttachment();
  // FAILED_PRECONDITION when `attachment` is a superseded one (another
  // trainer process registered since): two processes must not interleave
  // their steps on one daemon. UNAVAILABLE when nothing is registered with
  // this daemon: the attachment is an earlier daemon process's, and the
  // trainer must re-attach (RegisterModel) before it calls again. OK when
  // it is the current one, or absent (an older client).
  absl::Status CheckAttachment(std::optional<uint64_t> attachment) const;

  // Serialises trainer operations; held by each of the above.
  absl::Mutex& op_mutex() { return op_mu_; }

  // A new epoch's communicators are installed: a step in progress is
  // abandoned (the trainer redoes it after WaitReady; a trainer that was in
  // no call is told at its next one: StepLedger::EnterAttempt).
  void NewEpoch();
  // The trainer called WaitReady: its next call begins a new step attempt.
  void NoteWaitReady();
  // A new engine is installed: the protocol starts over.
  void EngineInstalled();
  // A new trainer process attached to `engine`: what the old one held is
  // released. True when it left a step half-way (collectives issued).
  // Call with op_mutex() held.
  bool Detach(StepEngine& engine);
  // A step committed outside Step (an in-doubt step the node applied):
  // recorded as Step records its own (a retry of it gets `response`).
  void NoteCommitted(const v1::StepResponse& response);
  // Nothing gathered or reduced (a step is not in progress).
  bool Idle() const;
  // The units the trainer holds gathered.
  std::vector<int> HeldUnits() const;
  // Counts an aborted step attempt for the metrics, once per attempt (the
  // first operation to see it).
  void CountAbort(absl::string_view reason);

  // A trainer's reference to `data` of `unit` of `engine`: shared memory or
  // a CUDA IPC handle with its tensor views.
  static v1::DataRef MakeRef(const StepEngine& engine, const UnitData& data,
                             int unit, const std::string& pci_bus_id);

 private:
  // What the commit vote answered, as the abort metric's reason: known
  // here, so never read back from a message.
  enum class VoteOutcome { kNotAsked, kUnanswered, kRejected };
  // The commit vote (invariant 1), run by the engine after the gradient
  // collectives and the norm, before the optimizer. Every member gets the
  // same answer, so either all apply the step or none does. Only an answer
  // that says "do not commit" is final; a vote that got no answer leaves
  // the prepared step in doubt (the node resolves it from the next epoch's
  // view).
  absl::Status Vote(int64_t epoch, uint64_t step_fingerprint,
                    const StepResult& prepared, VoteOutcome& outcome);
  // A Step that failed with `status`: drops a rejected step (or says that
  // an unanswered one is in doubt), counts the abort and maps the status.
  absl::Status StepFailed(StepEngine& engine, const absl::Status& status,
                          VoteOutcome outcome);
  // The host's engine when `unit` is one of its units: FAILED_PRECONDITION
  // (no model) or INVALID_ARGUMENT (unit out of range) otherwise.
  absl::StatusOr<std::shared_ptr<StepEngine>> EngineForUnit(int unit);
  // Releases `request.unit` when the trainer holds it (false when it does
  // not): what Release, Gather's release_first and ReduceGrad's release do.
  absl::StatusOr<bool> ReleaseHeld(StepEngine& engine,
                                   const v1::ReleaseRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReduceGrad's `release`, once the gradient is taken: `response` with
  // `released` set.
  absl::StatusOr<v1::ReduceGradResponse> ReleaseAfterReduce(
      StepEngine& engine, const v1::ReduceGradRequest& request,
      v1::ReduceGradResponse& response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the observer what one call (node_labels::kCall*) waited on
  // collectives: `engine`'s collective wait since `before`.
  void ReportWait(absl::string_view call, const StepEngine& engine,
                  absl::Duration before);
  // Tells the observer that the trainer called now.
  void NoteCall();
  // The host's ready epoch, or ABORTED counted as an epoch change: when it
  // is not ready, or the trainer's step attempt began in another epoch.
  absl::StatusOr<int64_t> EnterReadyEpoch();
  // Copies (or checks, when written in place) a ReduceGrad's gradient into
  // the unit's gradient slot, zeroing the padding.
  static absl::Status CopyFromSharedMemory(EngineMath& math,
                                           const UnitData& slot,
                                           const v1::DataRef& grad,
                                           uint8_t* dst);
  static absl::Status CheckCudaIpcGradient(EngineMath& math,
                                           const UnitData& slot,
                                           const v1::DataRef& grad);
  static absl::Status TakeGradient(StepEngine& engine, int unit,
                                   const UnitData& slot,
                                   const v1::DataRef& grad);

  const TrainerOpsOptions options_;
  absl::Mutex op_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  StepLedger ledger_ ABSL_GUARDED_BY(mu_);
  // The newest trainer's attachment (0: none registered yet).
  uint64_t attachment_ ABSL_GUARDED_BY(mu_) = 0;
};

// How the node reads a failed operation's status, by code only.
enum class OperationFailure {
  // Anything else: the request or this daemon's state (INVALID_ARGUMENT,
  // FAILED_PRECONDITION, RESOURCE_EXHAUSTED, NOT_FOUND...): passed
  // through, nothing else changes.
  kRequest,
  // UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED: a peer died or hung
  // (or the epoch moved on); the communicators are dead, the epoch is
  // abandoned and the trainer redoes the step in the next one (ABORTED).
  kPeer,
  // INTERNAL, UNKNOWN: a bug in shardd, not a peer's failure. The epoch is
  // abandoned all the same (peers must not wait in collectives this rank
  // will not finish), but the trainer gets INTERNAL, the abort is counted
  // as internal_error, and the failure is reported without blaming a peer.
  kBug,
};
OperationFailure ClassifyFailure(const absl::Status& status);

// ClassifyFailure(status) == kPeer.
bool IsCollectiveFailure(const absl::Status& status);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_TRAINER_OPS_H_
