#ifndef SHARDD_DAEMON_NODE_NODE_MANAGER_H_
#define SHARDD_DAEMON_NODE_NODE_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/host_transport.h"
#include "daemon/comm/store.h"
#include "daemon/core/clock.h"
#include "daemon/core/model_config.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/checkpoint_catalog.h"
#include "daemon/node/commit_sink.h"
#include "daemon/node/engine_admission.h"
#include "daemon/node/engine_backend.h"
#include "daemon/node/engine_holder.h"
#include "daemon/node/epoch_communicators.h"
#include "daemon/node/epoch_driver.h"
#include "daemon/node/event_log.h"
#include "daemon/node/export_record.h"
#include "daemon/node/membership.h"
#include "daemon/node/model_registration.h"
#include "daemon/node/peer_reachability.h"
#include "daemon/node/shard_checkpoints.h"
#include "daemon/node/shard_copy.h"
#include "daemon/node/shard_source.h"
#include "daemon/node/state_export.h"
#include "daemon/node/step_engine.h"
#include "daemon/node/trainer_ops.h"
#include "daemon/recovery/commit_log.h"
#include "daemon/recovery/shard_memory.h"
#include "daemon/recovery/shard_stream.h"
#include "shardd/v1/peer.pb.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

struct NodeOptions {
  // The node's ports to the coordinator (required): how it joins the job
  // (its Membership), and each epoch's rendezvous store (with this rank's
  // lease token). The daemon's come from UseCoordinator
  // (coordinator_ports.h, gRPC); tests may give others.
  JoinMembership join_membership;
  std::function<std::unique_ptr<comm::Store>(int64_t epoch, int rank,
                                             const std::string& lease_token)>
      store_of_epoch;
  // Stable identity (required) and the slot to claim (-1: any).
  std::string identity;
  int rank = -1;
  // host:port of this daemon's Peer service (already listening).
  std::string peer_address;
  // Address Gloo listens on for peers (the host of peer_address).
  std::string gloo_hostname = "127.0.0.1";
  // What the CPU backend's communicators run on (--collective_transport):
  // shared memory for a group whose members all run on this host (auto),
  // always Gloo over TCP (tcp), or shared memory required (shm).
  comm::TransportMode collective_transport = comm::TransportMode::kAuto;
  // Where gathered/gradient/shard segments are created, and the prefix of
  // their names (unique per process).
  std::string shm_dir = "/dev/shm";
  std::string shm_prefix = "shardd";
  // The shm directory's leftover bytes (no live owner) and bytes swept so
  // far, for GetStatus (ShmJanitor). Optional.
  std::function<std::pair<int64_t, int64_t>()> shm_usage;
  // Bounds every collective and the Gloo connection set-up.
  absl::Duration collective_timeout = absl::Seconds(30);
  // Check before every collective that the group's ranks issue the same
  // one (comm::VerifiedCollective): a debugging mode, an extra small
  // all-gather per collective.
  bool verify_collectives = false;
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration initial_join_timeout = absl::Seconds(30);

  // Recovery (checkpoint-free): how a replacement reaches a replica's Peer
  // service. Both are gRPC clients, injected so that the manager holds no
  // gRPC code; shardd_main passes the real ones (peer_client.h).
  // fetch_shard streams FetchShard from `peer_address`, handing every
  // message to `on_message` (whose error ends the stream).
  std::function<absl::Status(
      const std::string& peer_address, const v1::FetchShardRequest& request,
      MonoTime deadline,
      const std::function<absl::Status(const v1::FetchShardResponse&)>&
          on_message)>
      fetch_shard;
  std::function<absl::StatusOr<v1::ProbeResponse>(
      const std::string& peer_address, MonoTime deadline, bool include_model)>
      probe_peer;
  // Probes many members' Peer service at once (PeerProbePool::ProbeAll in
  // shardd_main: one status per address, in order).
  PeerReachability::Probe probe_peers;
  // Probing of the other members' Peer service with probe_peers, whose
  // unreachable peers go to the coordinator with every heartbeat: how a
  // node cut off from its peers (but not from the coordinator) is found.
  // Off without probe_peers or with a zero interval.
  PeerReachabilityOptions peer_probing;
  // How long a replacement keeps trying its sources before it gives up on
  // this epoch (and tries again in the next).
  absl::Duration recovery_timeout = absl::Seconds(120);
  // Ask sources to send the shard's bytes over the epoch's replica group
  // (the collective backend's Send/Recv, straight into the new engine)
  // while FetchShard carries the header, the pieces' CRCs and the trailer;
  // false: every byte inside the FetchShard stream. An attempt whose
  // replica group failed falls back to the stream for the next source.
  bool recovery_over_replica_group = true;

  // Optional: a per-rank log of every commit (commit_log.h) that tests and
  // the demo check for steps applied twice or skipped and replicas that
  // disagree. Empty: none (it costs a CRC of the shard per step).
  std::string commit_log_path;

  // Sharded checkpoints, the fallback when a shard has no live replica
  // (W/F = 1, or every holder failed): every checkpoint_interval_steps
  // committed steps each rank writes DIR/rank-R/step-N.shardckpt
  // (shard_checkpoint.h), keeping the newest checkpoint_keep_last. 0: none.
  std::string checkpoint_dir;
  int64_t checkpoint_interval_steps = 0;
  int checkpoint_keep_last = 2;
  // Stage each checkpoint in host memory and write it in the background
  // (CheckpointStager), so that the disk never holds a step.
  bool async_checkpoints = false;
  // A stopped job's checkpoint directory (that layout): every registration
  // that names no source of its own resumes from the latest step all of its
  // ranks hold intact (RegisterModelRequest.resume_from). Empty: none.
  std::string resume_from;
  // Told about steps, collectives, memory, epochs, recovery and
  // checkpoints. Optional (null: nothing reported); not owned, must outlive
  // the manager.
  metrics::NodeObserver* observer = nullptr;
  // Where the engine's memory lives and how communicators are made. Null:
  // the CPU backend (segments in shm_dir, Gloo).
  std::shared_ptr<EngineBackend> backend;
  // Decides, before anything is allocated, whether an engine, an
  // accumulation buffer or an export's staging fits in memory
  // (RESOURCE_EXHAUSTED with the breakdown otherwise). Never null.
  std::shared_ptr<EngineAdmission> admission = EngineAdmission::Unlimited();
  // Where the epoch driver reads the time (the coordinator's Clock port).
  // Not owned; never null.
  Clock* clock = Clock::Real();
};

// The state of one shardd daemon, without gRPC: membership (its Membership
// port),
// the current epoch's communicators (shard group "shard/<g>" and replica
// group "replica/<i>", formed through the coordinator's rendezvous store
// whenever the view shows all W members live in a new epoch) and the
// StepEngine created at RegisterModel. The Trainer RPCs map 1:1 onto the
// methods below, with the status codes trainer.proto documents.
//
// Threading: one background thread follows the membership and builds
// communicators. Trainer operations are serialised by TrainerOps (one trainer
// per daemon); GetStatus and Probe never block on a collective.
class NodeManager : private EpochActions,
                    private TrainerOpsHost,
                    private ModelRegistrationHost {
 public:
  // Joins the coordinator and starts following the membership.
  static absl::StatusOr<std::unique_ptr<NodeManager>> Start(
      NodeOptions options);
  // Stops the membership thread; does not Leave (use Shutdown).
  ~NodeManager() override;

  // Leaves the coordinator and stops following the membership. Buffers are
  // freed (segments unlinked) when the manager is destroyed.
  absl::Status Shutdown(absl::string_view reason);
  // The first step of a shutdown, before the trainer server drains its
  // calls: a WaitReady (or any operation waiting for a ready epoch) returns
  // UNAVAILABLE at once instead of at its deadline, which would hold the
  // server's drain, and no new epoch's communicators are built.
  void BeginShutdown();

  int rank() const;

  absl::StatusOr<v1::RegisterModelResponse> RegisterModel(
      const v1::RegisterModelRequest& request, MonoTime deadline);
  // `attachment`: the caller's RegisterModelResponse.attachment, when it
  // sent one (TrainerOps::CheckAttachment).
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
  absl::StatusOr<v1::WaitReadyResponse> WaitReady(
      const v1::WaitReadyRequest& request, MonoTime deadline,
      std::optional<uint64_t> attachment = std::nullopt);
  // `cancelled` (may be null): the caller went away; the writing stops as
  // at the deadline (StateExport).
  absl::StatusOr<v1::ExportStateResponse> ExportState(
      const v1::ExportStateRequest& request, MonoTime deadline,
      std::function<bool()> cancelled = nullptr);
  // Peer.FetchShard, source side: streams this rank's shard (parameters,
  // optimizer state, step) to a replacement with the same shard index,
  // calling `send` per message (false: the receiver went away). Status
  // codes as peer.proto documents.
  absl::Status ServeShard(
      const v1::FetchShardRequest& request, MonoTime deadline,
      const std::function<bool(const v1::FetchShardResponse&)>& send);

  // Trainer.WatchEvents: a snapshot (unless resuming after_sequence, while
  // the events after it are still kept), then every event in order until
  // `cancelled()`, the deadline (DEADLINE_EXCEEDED) or shutdown
  // (UNAVAILABLE). `send` false: the client went away (CANCELLED).
  absl::Status WatchEvents(
      const v1::WatchEventsRequest& request, MonoTime deadline,
      const std::function<bool(const v1::TrainerEvent&)>& send,
      const std::function<bool()>& cancelled);

  v1::GetStatusResponse GetStatus() const;
  // include_model: with the registered model and its fingerprint. A
  // replacement asks for it just before it copies this daemon's shard, so
  // this daemon then computes the copy's piece CRCs in the background
  // (PrecomputePieceCrcs): the copy itself then only moves bytes here.
  v1::ProbeResponse Probe(bool include_model = false);
  // OK while this daemon is (or may again become) a member; otherwise why
  // the coordinator ended its membership for good (a re-join refused, e.g.
  // ALREADY_EXISTS: another live process has its identity). Transient
  // errors are retried by the member client and never show here.
  absl::Status MembershipStatus() const;
  // OK, or DATA_LOSS with the reason once the job has failed (terminal).
  absl::Status JobFailure() const;
  // A trainer call was answered with the job's failure; how many were.
  // The daemon lingers after a failure until its trainer has heard it.
  void NoteJobFailureReplied() { job_failure_replies_.fetch_add(1); }
  int64_t job_failure_replies() const { return job_failure_replies_.load(); }

 private:
  explicit NodeManager(NodeOptions options);

  // Start's steps, in order: each wires one component.
  static absl::Status CheckOptions(const NodeOptions& options);
  // The commit log (if configured), events and interval checkpoints.
  absl::Status OpenCommitSink();
  // The engine backend (options_.backend or the CPU one) and its memory.
  void WireBackend();
  // What the membership reports of this node (but the checkpoints and
  // unreachable peers).
  MembershipJoin JoinOptions();
  // Verifies this rank's checkpoints before the join and reports them.
  void OpenCheckpointCatalog(MembershipJoin& join);
  // The probing of the peers (off without probe_peers or an interval).
  void WireReachability(MembershipJoin& join);
  // The trainer operations and the model registration (after the join).
  void WireTrainerOps();
  void WireCheckpoints();
  void WireShardCopy();
  void WireShardSource();
  // Starts following the membership on epoch_thread_.
  void StartEpochDriver();

  // EpochActions: what the epoch driver (epoch_thread_) asks of the node.
  LocalEpochState Local() override;
  int64_t CommittedStep() override;
  void NoteEpochChanged(const coordinator::MembershipView& view,
                        int64_t previous_epoch) override;
  void SupersedeCommunicators(int64_t epoch, const std::string& why) override;
  void AdoptTopology(int world_size, int sharding_factor) override;
  void SettleInDoubtStep(const coordinator::MembershipView& view,
                         std::optional<int64_t> rollback_step) override;
  void AbandonCheckpointsAbove(int64_t step) override;
  absl::Status RestoreCheckpoint(int64_t step, int64_t epoch) override;
  void NoteBadCheckpoint(int64_t step, const absl::Status& why) override;
  void PrepareEngine(const v1::ShardTransfer& plan, int world,
                     int factor) override;
  absl::Status BuildCommunicators(int64_t epoch, int world_size,
                                  int sharding_factor) override;
  void MarkCommunicatorsFailed(const std::string& why) override;
  absl::Status CopyShard(int64_t epoch, const v1::ShardTransfer& copy) override;
  void NoteRecoveryDone() override;
  void NoteRecoveryError(const std::string& error) override;
  void PublishHeld(int64_t epoch) override;
  void NoteReady(int64_t epoch, int64_t step, bool reported) override;
  void NoteJobFailed(const absl::Status& why) override;
  // True when communicators of the newest known epoch are up and healthy.
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (polling) until ready; DEADLINE_EXCEEDED at the deadline,
  // UNAVAILABLE when the daemon shuts down or its membership ended.
  absl::StatusOr<int64_t> WaitUntilReady(MonoTime deadline, int64_t min_epoch);
  // The engine when a model is registered, else FAILED_PRECONDITION.
  absl::StatusOr<std::shared_ptr<StepEngine>> EngineOrError() const;
  // TrainerOpsHost: what the trainer operations ask of the node.
  absl::StatusOr<std::shared_ptr<StepEngine>> Engine() override;
  absl::StatusOr<int64_t> EnterReadyEpoch() override;
  int64_t CurrentEpoch() override;
  uint64_t ModelFingerprint() override;
  void Committed(StepEngine& engine, const StepResult& result, int64_t epoch,
                 absl::Duration took) override;
  // Maps a collective failure: marks the communicators failed, reports a
  // suspect to the coordinator when one is known, returns ABORTED.
  absl::Status OnCollectiveError(absl::string_view what,
                                 absl::Status status) override;
  absl::Duration OpTimeout(MonoTime deadline) const;
  v1::Topology TopologyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ExportState's pieces.
  absl::Status StartExport(const v1::ExportStateRequest& request,
                           core::ModelConfig* model, int64_t* epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  StateExport::Options ExportOptions(int64_t epoch, MonoTime deadline,
                                     std::function<bool()> cancelled);
  absl::StatusOr<v1::ExportStateResponse> CollectiveExport(
      const v1::ExportStateRequest& request, MonoTime deadline,
      StepEngine& engine, int64_t epoch, StateExport& state_export,
      const ExportAdmission& admitted);
  // GetStatus's pieces.
  void AddPeerReachability(v1::GetStatusResponse* status) const;
  void AddCollectiveStatsLocked(v1::GetStatusResponse* status) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::MemoryReport MemoryReportLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ModelRegistrationHost: what a model registration asks of the node.
  bool Stopping() const override { return stop_.load(); }
  absl::StatusOr<int64_t> AwaitReadyEpoch(MonoTime deadline) override;
  absl::Mutex& TrainerOpMutex() override;
  NodeModelState ModelState() override;
  bool DetachTrainer(StepEngine& engine) override;
  // A rendezvous store client for `epoch`, with this rank's lease token.
  std::unique_ptr<comm::Store> StoreOfEpoch(int64_t epoch) override;
  int64_t InstallRegistered(std::shared_ptr<StepEngine> engine,
                            core::ModelConfig model, uint64_t fingerprint,
                            std::string agreement) override;
  v1::RegisterModelResponse RegisteredModel() override;
  // A StepEngine on this rank whose shard starts at zero (a shard copy's
  // or a checkpoint restore's, filled afterwards).
  absl::StatusOr<std::unique_ptr<StepEngine>> CreateZeroedEngine(
      const core::ModelConfig& model, int world, int factor);
  // A replacement's shard copy (JoinResponse.recovery): fetches parameters,
  // optimizer state and step from the planned sources in order, builds the
  // engine from the model in the stream and installs it. OK with nothing
  // done when the cluster holds no model yet.
  absl::Status RecoverFromReplicas(int64_t epoch,
                                   const v1::ShardTransfer& plan);
  // The one install path of a new engine (registered, restored, copied):
  // the holder's, and the trainer protocol's state starts over.
  void InstallEngineLocked(std::shared_ptr<StepEngine> engine,
                           core::ModelConfig model, uint64_t fingerprint,
                           std::string agreement)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a replica's copy of this rank's shard the node's (ShardCopy),
  // with what the source's header says it registered (agreement,
  // registration_state).
  void InstallCopiedEngine(std::shared_ptr<StepEngine> engine,
                           core::ModelConfig model, uint64_t fingerprint,
                           const v1::ShardHeader& header, int64_t epoch);
  // A step this daemon prepared and voted on without hearing the decision:
  // applied if another member of `view` (all W live) holds it committed,
  // else dropped (recovery::InDoubtStepWasCommitted).
  void ResolvePendingStep(const coordinator::MembershipView& view);
  // With a rollback to `step`: when this shard is at `step` with a later
  // step in doubt, drops that step (true); false otherwise.
  bool DropPendingAt(int64_t step, int64_t epoch);
  // (NoteJobFailed: the job failed: aborts the communicators (operations in
  // collectives return now), records the final step in the commit log and
  // tells WatchEvents. Called once, on the epoch thread.)
  // This epoch's replica group once this daemon has built it (waiting
  // until `deadline`); null when it is another epoch's, failed or absent.
  std::shared_ptr<comm::Collective> ReplicaGroupOf(int64_t epoch,
                                                   MonoTime deadline);
  // The engine and its description for a copy (ShardSource), under mu_.
  ShardSource::Snapshot ShardSnapshot() const;
  // Writes this rank's checkpoint of `step` (after a commit).
  void WriteCheckpoint(int64_t step, int64_t epoch);
  // Restores this rank's checkpoint of `step` (-1: the latest on disk),
  // creating the engine from the checkpoint's model when there is none.
  // Returns the step restored; errors name the file.
  absl::StatusOr<int64_t> RestoreCheckpointOf(int64_t step, int64_t epoch);
  // The communicators of the epoch are dead: mark them failed, abort them
  // and ask the coordinator for a new epoch (suspect -1: unknown culprit;
  // a dead peer's lease expires on its own).
  // Only when `epoch` is still the communicators' epoch: a failure of an
  // already replaced epoch's collective changes nothing.
  void AbandonEpoch(absl::string_view why, v1::FailureKind kind,
                    int64_t epoch) override;
  // As AbandonEpoch; with blame_peer false no suspect is named even when
  // it could be (W = 2): the failure is this rank's own (a bug).
  void AbandonEpochOf(absl::string_view why, v1::FailureKind kind,
                      int64_t epoch, bool blame_peer);
  // Counts an aborted step attempt for the metrics, once per attempt
  // (TrainerOps::CountAbort).
  void CountAbort(absl::string_view reason);
  // Tells the observer what the engine's buffers hold.
  void ReportMemory(const StepEngine& engine) const override;
  // Appends to the commit log, if configured (CRC of the current state).
  void LogCommit(recovery::CommitRecord::Kind kind, int64_t step,
                 int64_t epoch) override;

  const NodeOptions options_;
  // Created before client_ (its report goes into the client's heartbeats)
  // and started after it (it probes the client's view); stopped first.
  std::unique_ptr<PeerReachability> reachability_;
  // What the heartbeats report of the trainer. Declared before client_,
  // whose heartbeat thread reads it: destroyed after it.
  std::unique_ptr<TrainerPresence> trainer_presence_;
  // The membership port (MemberClientMembership in the daemon).
  std::unique_ptr<Membership> client_;
  // options_.backend, or the CPU one, and whether its memory is a device's.
  std::shared_ptr<EngineBackend> backend_;
  bool device_memory_ = false;
  // How recovery and checkpoints reach the engines' memory (the backend's
  // math).
  std::unique_ptr<recovery::ShardMemory> shard_memory_;
  // A replacement's copy of its shard (the target side of FetchShard).
  std::unique_ptr<ShardCopy> shard_copy_;
  // Serving this rank's shard to a replacement (the source side).
  std::unique_ptr<ShardSource> shard_source_;
  std::atomic<bool> stop_{false};
  // Follows the membership on epoch_thread_ (EpochDriver::Run).
  std::unique_ptr<EpochDriver> epoch_driver_;
  std::thread epoch_thread_;

  // The Trainer protocol's step operations and the per-operation lock
  // (taken before mu_).
  std::unique_ptr<TrainerOps> trainer_ops_;
  // RegisterModel, and the engines of shard copies and checkpoint
  // restores.
  std::unique_ptr<ModelRegistration> registration_;

  mutable absl::Mutex mu_;
  int world_size_ ABSL_GUARDED_BY(mu_) = 0;
  int sharding_factor_ ABSL_GUARDED_BY(mu_) = 0;
  // The current epoch's communicators and their health.
  EpochCommunicators comms_ ABSL_GUARDED_BY(mu_);
  // The engine and its model; InstallEngineLocked changes them.
  EngineHolder holder_ ABSL_GUARDED_BY(mu_);
  // FULL exports' outcomes across epochs (thread-safe on its own).
  ExportRecord export_record_;
  // The epoch of the communicators the current trainer operation uses (set
  // before it issues a collective; operations are serialised by TrainerOps).
  int64_t op_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // A replacement copying its shard; what it has done so far.
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  bool recovery_done_ ABSL_GUARDED_BY(mu_) = false;
  std::string recovery_error_ ABSL_GUARDED_BY(mu_);
  // The commit log, StepCommitted events and interval checkpoints.
  std::unique_ptr<CommitSink> commits_;
  EventLog events_;
  // The checkpoints of this rank the daemon verified (reported to the
  // coordinator with every join and heartbeat).
  std::unique_ptr<CheckpointCatalog> catalog_;
  // Writing and restoring this rank's sharded checkpoints.
  std::unique_ptr<ShardCheckpoints> checkpoints_;
  std::atomic<int64_t> job_failure_replies_{0};
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_NODE_MANAGER_H_
