#ifndef SHARDD_DAEMON_METRICS_NODE_OBSERVER_H_
#define SHARDD_DAEMON_METRICS_NODE_OBSERVER_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardd::metrics {

// Label values the node daemon passes to NodeObserver (docs/metrics.md).
// An implementation records any other string as "other", so a typo cannot
// create an unbounded number of time series.
namespace node_labels {
// CollectiveDone op.
inline constexpr char kAllGather[] = "all_gather";
inline constexpr char kReduceScatter[] = "reduce_scatter";
inline constexpr char kAllReduce[] = "all_reduce";
inline constexpr char kBroadcast[] = "broadcast";
// CollectiveDone group.
inline constexpr char kShardGroup[] = "shard";
inline constexpr char kReplicaGroup[] = "replica";
// StepAborted reason.
inline constexpr char kPeerFailure[] = "peer_failure";
inline constexpr char kVoteRejected[] = "vote_rejected";
inline constexpr char kEpochChanged[] = "epoch_changed";
// An operation failed with INTERNAL or UNKNOWN: a bug in shardd.
inline constexpr char kInternalError[] = "internal_error";
// RecoveryBytes direction.
inline constexpr char kSent[] = "sent";
inline constexpr char kReceived[] = "received";
// RecoveryTransfer role.
inline constexpr char kSource[] = "source";
inline constexpr char kTarget[] = "target";
// PrefetchHint result.
inline constexpr char kStarted[] = "started";
inline constexpr char kNotNeeded[] = "not_needed";
inline constexpr char kDropped[] = "dropped";
// MemoryAdmission request.
inline constexpr char kAdmitRegisterModel[] = "register_model";
inline constexpr char kAdmitEngine[] = "engine";
inline constexpr char kAdmitInitValues[] = "init_values";
inline constexpr char kAdmitAccumulation[] = "accumulation";
inline constexpr char kAdmitExport[] = "export";
inline constexpr char kAdmitCheckpointStaging[] = "checkpoint_staging";
// MemoryLimit scope.
inline constexpr char kLimitHost[] = "host";
inline constexpr char kLimitShm[] = "shm";
inline constexpr char kLimitDevice[] = "device";
inline constexpr char kLimitPlanned[] = "planned";
// TrainerWaited call: the trainer operation that waited.
inline constexpr char kCallGather[] = "gather";
inline constexpr char kCallReduceGrad[] = "reduce_grad";
inline constexpr char kCallStep[] = "step";
}  // namespace node_labels

// The bytes a daemon holds, by category: what the StepEngine's buffers hold
// and what the memory plan says they should (invariant 5).
struct ShardBytes {
  int64_t parameters = 0;
  int64_t lowp_parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  // Gathered (unsharded) parameter slots in use.
  int64_t gathered = 0;
  // The memory plan's total for this rank.
  int64_t planned = 0;
};

// What the node daemon reports about itself, one method per event, so that
// NodeManager and StepEngine stay free of any metrics library and are
// tested without a registry (inject nothing, or a recording fake).
//
// Every method has an empty default body: an implementation overrides what
// it needs. Implementations must be thread-safe and must not block (they
// are called on the step path and possibly with the caller's locks held),
// and must never call back into the daemon.
class NodeObserver {
 public:
  virtual ~NodeObserver() = default;

  // A Step whose vote said commit was applied; `step_time` is the whole
  // Step RPC (all-reduce + vote + optimizer), `step` the new committed step.
  virtual void StepCommitted(absl::Duration /*step_time*/, int64_t /*step*/) {}
  // A Step returned ABORTED (or INTERNAL); reason: node_labels::kPeerFailure,
  // kVoteRejected, kEpochChanged or kInternalError.
  virtual void StepAborted(absl::string_view /*reason*/) {}
  // One collective finished. op: all_gather, reduce_scatter, all_reduce,
  // broadcast; group: shard, replica; bytes: buffer bytes moved (the
  // nccl-tests size convention); ok: false when it returned an error.
  virtual void CollectiveDone(absl::string_view /*op*/,
                              absl::string_view /*group*/, int64_t /*bytes*/,
                              absl::Duration /*d*/, bool /*ok*/) {}
  // The bytes held now (after RegisterModel, and whenever they change).
  virtual void MemoryHeld(const ShardBytes& /*bytes*/) {}
  // The daemon's communicators moved to `epoch`; `ready` when the epoch is
  // ready (all members READY).
  virtual void EpochChanged(int64_t /*epoch*/, bool /*ready*/) {}
  // Shard bytes moved by Peer.FetchShard; direction: sent or received.
  virtual void RecoveryBytes(absl::string_view /*direction*/,
                             int64_t /*bytes*/) {}
  // One FetchShard transfer ended; role: source or target.
  virtual void RecoveryTransfer(absl::string_view /*role*/, bool /*ok*/) {}
  // A sharded checkpoint was written at `when`.
  virtual void CheckpointWritten(absl::Time /*when*/) {}
  // The trainer called Gather, Release, ReduceGrad, Step or WaitReady at
  // `when`: a rank whose trainer stops calling while its peers wait is the
  // one a stalled job waits for.
  virtual void TrainerCalled(absl::Time /*when*/) {}
  // Writing a sharded checkpoint failed (full disk, I/O error): training
  // goes on, but a later rollback can reach only older checkpoints.
  virtual void CheckpointWriteFailed() {}
  // An asynchronous checkpoint (--async_checkpoints) was skipped: the
  // previous one was still being written (a disk slower than the interval).
  virtual void CheckpointSkipped() {}
  // The host bytes held as asynchronous checkpoint staging (0: none).
  virtual void CheckpointStagingBytes(int64_t /*bytes*/) {}
  // A shard was restored from a checkpoint (no replica could give it).
  virtual void CheckpointRestored() {}
  // A Gather's prefetch hint was handled; result: kStarted (its AllGather
  // started), kNotNeeded (the unit was held, still gathered or already in
  // flight) or kDropped (K units in use, no free slot, no communicators).
  virtual void PrefetchHint(absl::string_view /*result*/) {}
  // A Gather was served by an earlier prefetch.
  virtual void PrefetchUsed() {}
  // Bytes in the shared-memory directory that no live daemon owns (a dead
  // daemon's leftovers not yet removed, or files of unknown owners), as the
  // latest sweep found them.
  virtual void ShmLeftoverBytes(int64_t /*bytes*/) {}
  // How many of this daemon's gRPC endpoints carry plaintext beyond this
  // machine, allowed by --insecure (0: none; see rpc/plaintext_policy.h).
  virtual void InsecureEndpoints(int /*n*/) {}
  // A sweep removed a dead daemon's files: how many and their bytes.
  virtual void ShmSwept(int64_t /*files*/, int64_t /*bytes*/) {}
  // A memory admission decided; request: kAdmitRegisterModel, kAdmitEngine,
  // kAdmitInitValues, kAdmitAccumulation, kAdmitExport or
  // kAdmitCheckpointStaging.
  virtual void MemoryAdmission(absl::string_view /*request*/,
                               bool /*admitted*/) {}
  // What a plan may use of `scope` (kLimitHost, kLimitShm, kLimitDevice,
  // kLimitPlanned) as the latest engine admission found it: the binding
  // limit less the safety margin.
  virtual void MemoryLimit(absl::string_view /*scope*/,
                           int64_t /*usable_bytes*/) {}
  // A trainer operation that reached the engine ended (whatever its
  // status); `waited` is the part of it spent blocked on collectives
  // (StepEngine::collective_wait), zero when none had to be waited for.
  // call: kCallGather, kCallReduceGrad or kCallStep.
  virtual void TrainerWaited(absl::string_view /*call*/,
                             absl::Duration /*waited*/) {}
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_NODE_OBSERVER_H_
