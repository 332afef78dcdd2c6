#include "daemon/node/node_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/comm/verified_collective.h"
#include "daemon/core/clock.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/memory_plan.h"
#include "daemon/node/cpu_engine_backend.h"
#include "daemon/node/engine_shard_memory.h"
#include "daemon/node/export_rendezvous.h"
#include "daemon/node/full_export_file.h"
#include "daemon/node/group_spec.h"
#include "daemon/node/observed_collective.h"
#include "daemon/node/proto_convert.h"
#include "daemon/node/shard_checkpoints.h"
#include "daemon/node/shard_copy.h"
#include "daemon/node/shard_source.h"
#include "daemon/node/shard_transfer.h"
#include "daemon/node/state_export.h"
#include "daemon/recovery/in_doubt_step.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "daemon/recovery/shard_stream.h"

namespace shardd::node {

NodeManager::NodeManager(NodeOptions options)
    : options_(std::move(options)),
      trainer_presence_(std::make_unique<TrainerPresence>(options_.clock)) {}

absl::StatusOr<std::unique_ptr<NodeManager>> NodeManager::Start(
    NodeOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  std::unique_ptr<NodeManager> m(new NodeManager(std::move(options)));
  if (absl::Status s = m->OpenCommitSink(); !s.ok()) return s;
  m->WireBackend();
  MembershipJoin join = m->JoinOptions();
  m->OpenCheckpointCatalog(join);
  m->WireReachability(join);
  absl::StatusOr<std::unique_ptr<Membership>> client =
      m->options_.join_membership(join);
  if (!client.ok()) return client.status();
  m->client_ = std::move(*client);
  m->WireTrainerOps();
  m->WireCheckpoints();
  m->WireShardCopy();
  m->WireShardSource();
  if (m->reachability_ != nullptr) m->reachability_->Start();
  m->StartEpochDriver();
  return m;
}

absl::Status NodeManager::CheckOptions(const NodeOptions& options) {
  if (options.identity.empty()) {
    return absl::InvalidArgumentError("identity: required");
  }
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("clock: required (Clock::Real())");
  }
  if (!options.join_membership || !options.store_of_epoch) {
    return absl::InvalidArgumentError(
        "join_membership and store_of_epoch: required (UseCoordinator)");
  }
  return absl::OkStatus();
}

absl::Status NodeManager::OpenCommitSink() {
  CommitSink::Options commit_options;
  if (!options_.commit_log_path.empty()) {
    absl::StatusOr<std::unique_ptr<recovery::CommitLog>> log =
        recovery::CommitLog::Open(options_.commit_log_path);
    if (!log.ok()) return log.status();
    commit_options.commit_log = std::move(*log);
  }
  commit_options.events = &events_;
  commit_options.checkpoint_interval_steps = options_.checkpoint_interval_steps;
  commit_options.write_checkpoint = [this](int64_t step, int64_t epoch) {
    WriteCheckpoint(step, epoch);
  };
  commits_ = std::make_unique<CommitSink>(std::move(commit_options));
  return absl::OkStatus();
}

void NodeManager::WireBackend() {
  backend_ = options_.backend != nullptr
                 ? options_.backend
                 : std::make_shared<CpuEngineBackend>(
                       options_.shm_dir, options_.shm_prefix,
                       options_.collective_transport);
  device_memory_ = backend_->math()->device_memory();
  shard_memory_ = std::make_unique<EngineShardMemory>(backend_->math());
}

MembershipJoin NodeManager::JoinOptions() {
  MembershipJoin join;
  join.rank = options_.rank;
  join.identity = options_.identity;
  join.peer_address = options_.peer_address;
  join.initial_join_timeout = options_.initial_join_timeout;
  join.info["pid"] = absl::StrCat(getpid());
  TrainerPresence* presence = trainer_presence_.get();
  join.trainer = [presence] { return presence->Report(); };
  join.shard_status = [this] {
    coordinator::MemberShardStatus status;
    // Never blocks on a collective: mu_ is only held briefly.
    absl::MutexLock lock(&mu_);
    if (holder_.engine() != nullptr) {
      status.holds_shard = true;
      status.committed_step = holder_.engine()->committed_step();
      status.model_fingerprint = holder_.fingerprint();
      status.pending_step = holder_.engine()->pending_step().value_or(0);
      status.registration_state = holder_.registration_state();
    }
    return status;
  };
  return join;
}

void NodeManager::OpenCheckpointCatalog(MembershipJoin& join) {
  // Checkpoints this daemon can vouch for: a rollback is planned only to a
  // step every rank holds intact. They are verified before the join (shardd
  // requires --rank with --checkpoint_dir), so the coordinator's first plan
  // knows them.
  catalog_ = std::make_unique<CheckpointCatalog>(options_.checkpoint_dir);
  if (!options_.checkpoint_dir.empty() && options_.rank >= 0) {
    // A killed writer's temporary: never a checkpoint, only wasted space.
    absl::StatusOr<std::vector<std::string>> swept =
        recovery::RemoveDeadCheckpointTemporaries(options_.checkpoint_dir,
                                                  options_.rank);
    if (swept.ok()) {
      for (const std::string& path : *swept) {
        std::printf("shardd: removed a dead writer's checkpoint temporary %s\n",
                    path.c_str());
      }
    }
    catalog_->Scan(options_.rank);
  }
  CheckpointCatalog* catalog = catalog_.get();
  join.checkpoints = [catalog] { return catalog->Inventory(); };
}

void NodeManager::WireReachability(MembershipJoin& join) {
  if (!options_.probe_peers ||
      options_.peer_probing.interval <= absl::ZeroDuration()) {
    return;
  }
  reachability_ = std::make_unique<PeerReachability>(
      options_.peer_probing, options_.probe_peers,
      [this] {
        // The members of the current view this daemon exchanges data
        // with (client_ is set before the probing starts and reset after
        // it stops).
        std::vector<ProbeTarget> members;
        const coordinator::MembershipView view = client_->view();
        for (const v1::MemberInfo& m : view.members) {
          members.push_back({m.rank(), m.peer_address(), m.incarnation()});
        }
        return GroupPeers(view.rank, view.sharding_factor, members);
      },
      [this](const UnreachablePeerReport& peer, bool unreachable) {
        if (unreachable) {
          std::printf(
              "shardd rank %d: peer rank %d at %s unreachable (%d probes "
              "failed: %s); reported to the coordinator\n",
              client_->rank(), peer.rank, peer.address.c_str(),
              peer.failed_probes, peer.error.c_str());
        } else {
          std::printf("shardd rank %d: peer rank %d at %s reachable again\n",
                      client_->rank(), peer.rank, peer.address.c_str());
        }
        std::fflush(stdout);
      });
  PeerReachability* reachability = reachability_.get();
  join.unreachable_peers = [reachability] {
    std::vector<v1::UnreachablePeer> out;
    for (const UnreachablePeerReport& p : reachability->Unreachable()) {
      v1::UnreachablePeer u;
      u.set_rank(p.rank);
      u.set_incarnation(p.incarnation);
      u.set_failed_probes(p.failed_probes);
      u.set_error(p.error);
      out.push_back(std::move(u));
    }
    return out;
  };
}

void NodeManager::WireTrainerOps() {
  trainer_ops_ = std::make_unique<TrainerOps>(
      TrainerOpsOptions{.membership = client_.get(),
                        .host = static_cast<TrainerOpsHost*>(this),
                        .observer = options_.observer,
                        .collective_timeout = options_.collective_timeout,
                        .pci_bus_id = backend_->pci_bus_id(),
                        .presence = trainer_presence_.get()});
  registration_ = std::make_unique<ModelRegistration>(ModelRegistrationOptions{
      .membership = client_.get(),
      .host = static_cast<ModelRegistrationHost*>(this),
      .backend = backend_.get(),
      .admission = options_.admission.get(),
      .resume_from = options_.resume_from});
}

void NodeManager::WireCheckpoints() {
  checkpoints_ = std::make_unique<ShardCheckpoints>(ShardCheckpoints::Options{
      .dir = options_.checkpoint_dir,
      .keep_last = options_.checkpoint_keep_last,
      .shard_memory = shard_memory_.get(),
      .catalog = catalog_.get(),
      .membership = client_.get(),
      .observer = options_.observer,
      .async = options_.async_checkpoints,
      .admit_staging =
          [this](int64_t bytes) {
            const std::shared_ptr<StepEngine> e =
                EngineOrError().value_or(nullptr);
            return options_.admission->AdmitCheckpointStaging(
                bytes, e ? e->held_bytes() : 0);
          },
      .staging_held =
          [this](int64_t bytes) {
            options_.admission->NoteCheckpointStagingHeld(bytes);
          },
      .common_step = [this] { return client_->common_checkpoint_step(); },
      .quiesce_timeout = options_.collective_timeout});
}

void NodeManager::WireShardCopy() {
  ShardCopy::Options copy;
  copy.fetch_shard = options_.fetch_shard;
  copy.probe_peer = options_.probe_peer;
  copy.over_replica_group = options_.recovery_over_replica_group;
  copy.recovery_timeout = options_.recovery_timeout;
  copy.shard_memory = shard_memory_.get();
  copy.observer = options_.observer;
  copy.events = &events_;
  copy.clock = options_.clock;
  copy.membership = client_.get();
  copy.create_engine = [this](const core::ModelConfig& model, int world,
                              int factor) {
    return CreateZeroedEngine(model, world, factor);
  };
  copy.replica_group_of = [this](int64_t epoch) {
    return ReplicaGroupOf(epoch, MonoNow());
  };
  copy.install = [this](std::shared_ptr<StepEngine> engine,
                        core::ModelConfig model, uint64_t fingerprint,
                        const v1::ShardHeader& header, int64_t epoch) {
    InstallCopiedEngine(std::move(engine), std::move(model), fingerprint,
                        header, epoch);
  };
  shard_copy_ = std::make_unique<ShardCopy>(std::move(copy));
}

void NodeManager::WireShardSource() {
  ShardSource::Options source;
  source.shard_memory = shard_memory_.get();
  source.observer = options_.observer;
  source.membership = client_.get();
  source.snapshot = [this] { return ShardSnapshot(); };
  source.replica_group_of = [this](int64_t epoch, MonoTime deadline) {
    return ReplicaGroupOf(epoch, deadline);
  };
  shard_source_ = std::make_unique<ShardSource>(std::move(source));
}

void NodeManager::StartEpochDriver() {
  epoch_driver_ = std::make_unique<EpochDriver>(
      client_.get(), static_cast<EpochActions*>(this), options_.clock);
  epoch_thread_ = std::thread([this] { epoch_driver_->Run(); });
}

NodeManager::~NodeManager() {
  stop_ = true;
  if (epoch_driver_ != nullptr) epoch_driver_->Stop();
  if (reachability_ != nullptr) reachability_->Stop();
  if (epoch_thread_.joinable()) epoch_thread_.join();
  // Probe (the only place that starts a CRC computation) no longer runs:
  // the peer server is shut down before the manager goes.
  shard_source_.reset();
  // A checkpoint write in flight ends first: it tells the catalog and the
  // coordinator client when it is done.
  checkpoints_.reset();
  client_.reset();
  absl::MutexLock lock(&mu_);
  holder_.Reset();
  comms_.Clear();
}

void NodeManager::BeginShutdown() {
  stop_ = true;
  if (epoch_driver_ != nullptr) epoch_driver_->Stop();
}

absl::Status NodeManager::Shutdown(absl::string_view reason) {
  BeginShutdown();
  if (reachability_ != nullptr) reachability_->Stop();
  events_.Close();
  if (epoch_thread_.joinable()) epoch_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    comms_.AbortAll("node shutting down");
  }
  // A checkpoint being written is of a committed step: finish it (bounded
  // by the collective timeout), and write the last one if it was skipped
  // behind it; the coordinator hears of them before the member leaves.
  if (checkpoints_ != nullptr) {
    if (absl::Status flushed =
            checkpoints_->Flush(ShardSnapshot(), CurrentEpoch());
        !flushed.ok()) {
      std::fprintf(stderr, "shardd: shutdown: %s\n",
                   flushed.ToString().c_str());
    }
  }
  return client_->Leave(reason);
}

int NodeManager::rank() const { return client_->rank(); }

LocalEpochState NodeManager::Local() {
  absl::MutexLock lock(&mu_);
  LocalEpochState local;
  local.comm_epoch = comms_.epoch();
  local.holds_engine = holder_.engine() != nullptr;
  local.engine_prepared = shard_copy_->prepared();
  return local;
}

int64_t NodeManager::CommittedStep() {
  absl::MutexLock lock(&mu_);
  return holder_.engine() != nullptr ? holder_.engine()->committed_step() : 0;
}

void NodeManager::NoteEpochChanged(const coordinator::MembershipView& view,
                                   int64_t previous_epoch) {
  v1::TrainerEvent event;
  event.set_epoch(view.epoch);
  v1::EpochChanged* changed = event.mutable_epoch_changed();
  changed->set_previous_epoch(previous_epoch);
  changed->set_epoch(view.epoch);
  changed->set_reason(view.reason);
  for (const v1::MemberInfo& m : view.members) *changed->add_members() = m;
  events_.Append(std::move(event));
}

void NodeManager::SupersedeCommunicators(int64_t epoch,
                                         const std::string& why) {
  // The communicators belong to an older epoch: they are dead (a member
  // left, died or hung). Abort them at once so that a trainer operation
  // blocked in a collective with a hung peer returns now, not at the
  // collective timeout.
  absl::MutexLock lock(&mu_);
  comms_.Supersede(epoch, why);
}

void NodeManager::AdoptTopology(int world_size, int sharding_factor) {
  absl::MutexLock lock(&mu_);
  world_size_ = world_size;
  sharding_factor_ = sharding_factor;
}

void NodeManager::SettleInDoubtStep(const coordinator::MembershipView& view,
                                    std::optional<int64_t> rollback_step) {
  // A rollback to the step this member holds has it drop the in-doubt step
  // instead (the plan counted on it).
  if (!rollback_step.has_value() ||
      !DropPendingAt(*rollback_step, view.epoch)) {
    ResolvePendingStep(view);
  }
}

void NodeManager::AbandonCheckpointsAbove(int64_t step) {
  checkpoints_->AbandonAbove(client_->rank(), step);
}

absl::Status NodeManager::RestoreCheckpoint(int64_t step, int64_t epoch) {
  return RestoreCheckpointOf(step, epoch).status();
}

void NodeManager::NoteBadCheckpoint(int64_t step, const absl::Status& why) {
  catalog_->NoteBad(step, why.ToString());
}

void NodeManager::MarkCommunicatorsFailed(const std::string& why) {
  absl::MutexLock lock(&mu_);
  comms_.MarkFailed(why);
}

absl::Status NodeManager::CopyShard(int64_t epoch,
                                    const v1::ShardTransfer& copy) {
  return RecoverFromReplicas(epoch, copy);
}

void NodeManager::NoteRecoveryDone() {
  absl::MutexLock lock(&mu_);
  recovery_done_ = true;
}

void NodeManager::NoteRecoveryError(const std::string& error) {
  absl::MutexLock lock(&mu_);
  recovery_error_ = error;
}

void NodeManager::PublishHeld(int64_t epoch) {
  // Only while the shard is what registering made: ranks register anew
  // only then (a shard lost later is copied, restored or the job fails),
  // and the agreement (the model spec, 8 bytes a tensor) need not travel
  // through the coordinator at every epoch of a long job.
  std::string agreement;
  {
    absl::MutexLock lock(&mu_);
    if (holder_.registration_state()) agreement = holder_.agreement();
  }
  std::unique_ptr<comm::Store> store = StoreOfEpoch(epoch);
  ModelRegistration::PublishHeld(*store, client_->rank(), agreement, epoch);
  ExportRendezvous::PublishOutcome(*store, export_record_, client_->rank());
}

void NodeManager::NoteReady(int64_t epoch, int64_t step, bool reported) {
  if (reported) {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    event.mutable_ready()->set_committed_step(step);
    events_.Append(std::move(event));
  }
  if (options_.observer != nullptr) {
    options_.observer->EpochChanged(epoch, reported);
  }
}

absl::Status NodeManager::BuildCommunicators(int64_t epoch, int world_size,
                                             int sharding_factor) {
  if (world_size < 1 || sharding_factor < 1 ||
      world_size % sharding_factor != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "coordinator gives W=", world_size, " F=", sharding_factor));
  }
  const int rank = client_->rank();
  std::unique_ptr<comm::Store> store = StoreOfEpoch(epoch);
  GroupSpec shard;
  shard.rank = rank % sharding_factor;
  shard.size = sharding_factor;
  shard.epoch = epoch;
  shard.group = absl::StrCat("shard/", rank / sharding_factor);
  shard.job_ranks = ShardGroupJobRanks(rank, sharding_factor);
  shard.listen_host = options_.gloo_hostname;
  shard.connect_timeout = options_.connect_timeout;
  shard.default_op_timeout = options_.collective_timeout;
  GroupSpec replica = shard;
  replica.rank = rank / sharding_factor;
  replica.size = world_size / sharding_factor;
  replica.group = absl::StrCat("replica/", rank % sharding_factor);
  replica.job_ranks = ReplicaGroupJobRanks(rank, world_size, sharding_factor);
  absl::StatusOr<std::unique_ptr<comm::Collective>> s =
      backend_->MakeCollective(shard, *store);
  if (!s.ok()) return s.status();
  absl::StatusOr<std::unique_ptr<comm::Collective>> r =
      backend_->MakeCollective(replica, *store);
  if (!r.ok()) return r.status();
  std::shared_ptr<comm::Collective> shard_group = std::move(*s);
  std::shared_ptr<comm::Collective> replica_group = std::move(*r);
  if (options_.verify_collectives) {
    shard_group = std::make_shared<comm::VerifiedCollective>(
        std::move(shard_group), shard.group);
    replica_group = std::make_shared<comm::VerifiedCollective>(
        std::move(replica_group), replica.group);
  }
  if (options_.observer != nullptr) {
    shard_group = std::make_shared<ObservedCollective>(
        std::move(shard_group), metrics::node_labels::kShardGroup,
        options_.observer);
    replica_group = std::make_shared<ObservedCollective>(
        std::move(replica_group), metrics::node_labels::kReplicaGroup,
        options_.observer);
  }
  std::shared_ptr<StepEngine> engine;
  {
    absl::MutexLock lock(&mu_);
    comms_.Install(epoch, shard_group, replica_group);
    // A step in progress when the old epoch broke is abandoned: the trainer
    // redoes it after WaitReady (told at its next call if it was in none).
    trainer_ops_->NewEpoch();
    engine = holder_.engine();
  }
  if (engine != nullptr) engine->SetCommunicators(shard_group, replica_group);
  return absl::OkStatus();
}

bool NodeManager::ReadyLocked() const {
  // The coordinator's readiness too: a replacement may still be copying
  // its shard, and collectives with it would wait for nothing.
  const coordinator::MembershipView view = client_->view();
  return comms_.healthy() && view.epoch == comms_.epoch() && view.ready;
}

void NodeManager::NoteJobFailed(const absl::Status& why) {
  // The membership's status already says "the job has failed: ...".
  const std::string reason(why.message());
  std::printf("shardd rank %d: %s%s\n", client_->rank(),
              absl::StartsWith(reason, "the job has failed")
                  ? ""
                  : "the job has failed: ",
              reason.c_str());
  std::fflush(stdout);
  int64_t step = -1;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    comms_.AbortAll(why.message());
    if (holder_.engine() != nullptr) step = holder_.engine()->committed_step();
    epoch = comms_.epoch();
  }
  // The last committed step and its checksum, for the record: this shard
  // is intact and nothing after it is half-written. Trainer operations are
  // done (their collectives were just aborted) before the state is read.
  if (step >= 0) {
    absl::MutexLock op(&trainer_ops_->op_mutex());
    LogCommit(recovery::CommitRecord::Kind::kFinal, step, epoch);
  }
  v1::TrainerEvent event;
  event.set_epoch(client_->view().epoch);
  event.mutable_job_failed()->set_reason(std::string(why.message()));
  events_.Append(std::move(event));
}

absl::Status NodeManager::JobFailure() const {
  absl::Status ended = client_->view().error;
  return absl::IsDataLoss(ended) ? ended : absl::OkStatus();
}

absl::StatusOr<int64_t> NodeManager::WaitUntilReady(MonoTime deadline,
                                                    int64_t min_epoch) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (ReadyLocked() && comms_.epoch() >= min_epoch) return comms_.epoch();
    }
    if (absl::Status failed = JobFailure(); !failed.ok()) return failed;
    if (stop_.load()) {
      return absl::UnavailableError("the daemon is shutting down");
    }
    if (absl::Status ended = client_->view().error; !ended.ok()) {
      return absl::UnavailableError(
          absl::StrCat("this daemon is no longer a member (", ended.ToString(),
                       "); it is exiting"));
    }
    if (MonoNow() >= deadline) {
      absl::MutexLock lock(&mu_);
      return absl::DeadlineExceededError(absl::StrCat(
          "not in a ready epoch (communicators of epoch ", comms_.epoch(),
          comms_.failed() ? absl::StrCat(" failed: ", comms_.error()) : "",
          "; coordinator epoch ", client_->view().epoch, ")"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::Status NodeManager::MembershipStatus() const {
  return client_->view().error;
}

absl::StatusOr<std::shared_ptr<StepEngine>> NodeManager::EngineOrError() const {
  absl::MutexLock lock(&mu_);
  if (holder_.engine() == nullptr) {
    return absl::FailedPreconditionError(
        "no model registered: call RegisterModel first");
  }
  return holder_.engine();
}

absl::StatusOr<std::shared_ptr<StepEngine>> NodeManager::Engine() {
  return EngineOrError();
}

absl::StatusOr<int64_t> NodeManager::EnterReadyEpoch() {
  absl::MutexLock lock(&mu_);
  if (!ReadyLocked()) {
    return absl::AbortedError(absl::StrCat(
        "the daemon is not in a ready epoch",
        comms_.failed() ? absl::StrCat(" (", comms_.error(), ")") : "",
        "; WaitReady, then redo the step"));
  }
  op_epoch_ = comms_.epoch();
  return op_epoch_;
}

int64_t NodeManager::CurrentEpoch() {
  absl::MutexLock lock(&mu_);
  return comms_.epoch();
}

uint64_t NodeManager::ModelFingerprint() {
  absl::MutexLock lock(&mu_);
  return holder_.fingerprint();
}

void NodeManager::Committed(StepEngine& engine, const StepResult& result,
                            int64_t epoch, absl::Duration took) {
  if (options_.observer != nullptr) {
    options_.observer->StepCommitted(took, result.step);
    ReportMemory(engine);
  }
  commits_->Committed(engine, result.step, result.grad_norm, epoch);
  // The trainer moved on: an export attempt it left unresolved is no
  // longer the one a later export at that step number retries.
  export_record_.NoteCommitted();
}

absl::Duration NodeManager::OpTimeout(MonoTime deadline) const {
  // Collectives are matched across ranks, so they run to the daemon's
  // collective timeout even when the caller's deadline is shorter.
  (void)deadline;
  return options_.collective_timeout;
}

absl::Status NodeManager::OnCollectiveError(absl::string_view what,
                                            absl::Status status) {
  const OperationFailure failure = ClassifyFailure(status);
  if (failure == OperationFailure::kRequest) return status;
  const bool bug = failure == OperationFailure::kBug;
  CountAbort(bug ? metrics::node_labels::kInternalError
                 : metrics::node_labels::kPeerFailure);
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    epoch = op_epoch_;
  }
  {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    v1::StepAborted* aborted = event.mutable_step_aborted();
    {
      absl::MutexLock lock(&mu_);
      if (holder_.engine() != nullptr)
        aborted->set_step(holder_.engine()->committed_step() + 1);
    }
    aborted->set_reason(absl::StrCat(what, ": ", status.message()));
    events_.Append(std::move(event));
  }
  // A bug blames no peer (not even with W = 2): the coordinator starts a
  // new epoch and removes nobody.
  AbandonEpochOf(
      absl::StrCat(bug ? "shardd bug: " : "", what, ": ", status.message()),
      absl::IsDeadlineExceeded(status) ? v1::FAILURE_KIND_COLLECTIVE_TIMEOUT
                                       : v1::FAILURE_KIND_COLLECTIVE_FAILED,
      epoch, /*blame_peer=*/!bug);
  if (bug) {
    return absl::InternalError(absl::StrCat(
        what, " failed in epoch ", epoch, " with a shardd bug (not a peer ",
        "failure): ", status.ToString(),
        "; the epoch was abandoned so that no peer waits for this rank"));
  }
  return absl::AbortedError(absl::StrCat(
      what, " failed in epoch ", epoch, ": ", status.ToString(),
      "; wait for the next ready epoch (WaitReady) and redo the step"));
}

void NodeManager::AbandonEpoch(absl::string_view why, v1::FailureKind kind,
                               int64_t epoch) {
  AbandonEpochOf(why, kind, epoch, /*blame_peer=*/true);
}

void NodeManager::AbandonEpochOf(absl::string_view why, v1::FailureKind kind,
                                 int64_t epoch, bool blame_peer) {
  int world = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!comms_.Abandon(epoch, why)) return;  // Already replaced.
    world = world_size_;
  }
  // With two ranks the culprit is known: the other one. Otherwise the
  // coordinator starts a new epoch without removing anyone; a dead peer's
  // lease runs out on its own.
  const int suspect = blame_peer && world == 2 ? 1 - client_->rank() : -1;
  (void)client_->ReportFailure(suspect, kind, why, epoch);
}

void NodeManager::LogCommit(recovery::CommitRecord::Kind kind, int64_t step,
                            int64_t epoch) {
  if (!commits_->logs_commits()) return;
  std::shared_ptr<StepEngine> engine;
  {
    absl::MutexLock lock(&mu_);
    engine = holder_.engine();
  }
  if (engine != nullptr) commits_->Record(*engine, kind, step, epoch);
}

v1::Topology NodeManager::TopologyLocked() const {
  v1::Topology t;
  const int rank = client_->rank();
  t.set_world_size(world_size_);
  t.set_sharding_factor(sharding_factor_);
  t.set_rank(rank);
  if (sharding_factor_ > 0 && world_size_ > 0) {
    const int f = sharding_factor_;
    t.set_shard_index(rank % f);
    t.set_shard_group(rank / f);
    for (int r = (rank / f) * f; r < (rank / f + 1) * f; ++r) {
      t.add_shard_group_ranks(r);
    }
    for (int r = rank % f; r < world_size_; r += f) {
      t.add_replica_group_ranks(r);
    }
  }
  return t;
}

v1::MemoryReport NodeManager::MemoryReportLocked() const {
  v1::MemoryReport report;
  if (std::optional<EngineBackend::DeviceMemory> device =
          backend_->device_memory()) {
    report.set_device_free_bytes(device->free_bytes);
    report.set_device_total_bytes(device->total_bytes);
  }
  if (holder_.engine() == nullptr) return report;
  *report.mutable_planned() =
      ProtoConvert::MemoryToProto(holder_.engine()->planned_memory());
  // What the engine's buffers hold, per category.
  *report.mutable_held() =
      ProtoConvert::MemoryToProto(holder_.engine()->held_memory());
  const EngineConfig& config = holder_.engine()->config();
  const int shard_index = client_->rank() % config.plan.sharding_factor();
  for (size_t u = 0; u < config.units.size(); ++u) {
    const core::UnitLayout& layout = config.units[u];
    v1::UnitMemory* um = report.add_units();
    um->set_unit(u);
    um->set_name(holder_.model_if_any().has_value()
                     ? holder_.model().units[u].name
                     : "");
    um->set_numel(layout.numel());
    um->set_padded_numel(layout.padded_numel());
    um->set_shard_offset(layout.shard(shard_index).offset);
    um->set_shard_numel(layout.shard(shard_index).numel);
    um->set_shard_padding(layout.shard(shard_index).padding);
  }
  return report;
}

std::unique_ptr<comm::Store> NodeManager::StoreOfEpoch(int64_t epoch) {
  return options_.store_of_epoch(
      epoch, client_->rank(),
      client_->SettledLeaseToken(MonoNow() + options_.connect_timeout));
}

absl::StatusOr<int64_t> NodeManager::AwaitReadyEpoch(MonoTime deadline) {
  return WaitUntilReady(deadline, 0);
}

absl::Mutex& NodeManager::TrainerOpMutex() { return trainer_ops_->op_mutex(); }

NodeModelState NodeManager::ModelState() {
  absl::MutexLock lock(&mu_);
  NodeModelState state;
  state.world_size = world_size_;
  state.sharding_factor = sharding_factor_;
  state.epoch = comms_.epoch();
  state.engine = holder_.engine();
  if (state.engine != nullptr) state.model = holder_.model_if_any();
  return state;
}

bool NodeManager::DetachTrainer(StepEngine& engine) {
  return trainer_ops_->Detach(engine);
}

int64_t NodeManager::InstallRegistered(std::shared_ptr<StepEngine> engine,
                                       core::ModelConfig model,
                                       uint64_t fingerprint,
                                       std::string agreement) {
  absl::MutexLock lock(&mu_);
  InstallEngineLocked(std::move(engine), std::move(model), fingerprint,
                      std::move(agreement));
  holder_.NoteRegistered();
  return comms_.epoch();
}

v1::RegisterModelResponse NodeManager::RegisteredModel() {
  absl::MutexLock lock(&mu_);
  v1::RegisterModelResponse response;
  response.set_committed_step(holder_.engine()->committed_step());
  response.set_epoch(comms_.epoch());
  *response.mutable_topology() = TopologyLocked();
  *response.mutable_memory() = MemoryReportLocked();
  response.set_model_fingerprint(holder_.fingerprint());
  return response;
}

absl::StatusOr<std::unique_ptr<StepEngine>> NodeManager::CreateZeroedEngine(
    const core::ModelConfig& model, int world, int factor) {
  return registration_->CreateEngine(model, world, factor,
                                     [](int, int64_t, float* out, int64_t n) {
                                       std::fill(out, out + n, 0.0f);
                                     });
}

absl::StatusOr<v1::RegisterModelResponse> NodeManager::RegisterModel(
    const v1::RegisterModelRequest& request, MonoTime deadline) {
  absl::StatusOr<v1::RegisterModelResponse> registered =
      registration_->RegisterModel(request, deadline);
  if (registered.ok())
    registered->set_attachment(trainer_ops_->NewAttachment());
  return registered;
}

absl::StatusOr<v1::GatherResponse> NodeManager::Gather(
    const v1::GatherRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  return trainer_ops_->Gather(request, deadline, attachment);
}

absl::StatusOr<v1::ReleaseResponse> NodeManager::Release(
    const v1::ReleaseRequest& request, std::optional<uint64_t> attachment) {
  return trainer_ops_->Release(request, attachment);
}

absl::StatusOr<v1::ReduceGradResponse> NodeManager::ReduceGrad(
    const v1::ReduceGradRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  return trainer_ops_->ReduceGrad(request, deadline, attachment);
}

absl::StatusOr<v1::StepResponse> NodeManager::Step(
    const v1::StepRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  return trainer_ops_->Step(request, deadline, attachment);
}

absl::StatusOr<v1::WaitReadyResponse> NodeManager::WaitReady(
    const v1::WaitReadyRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  if (absl::Status s = trainer_ops_->CheckAttachment(attachment); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  trainer_ops_->NoteWaitReady();
  absl::StatusOr<int64_t> epoch = WaitUntilReady(deadline, request.min_epoch());
  if (!epoch.ok()) return epoch.status();
  v1::WaitReadyResponse response;
  response.set_epoch(*epoch);
  response.set_committed_step((*engine)->committed_step());
  return response;
}

absl::StatusOr<v1::ExportStateResponse> NodeManager::ExportState(
    const v1::ExportStateRequest& request, MonoTime deadline,
    std::function<bool()> cancelled) {
  if (absl::Status s = StateExport::CheckRequest(request); !s.ok()) return s;
  absl::MutexLock op(&trainer_ops_->op_mutex());
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  core::ModelConfig model;
  int64_t epoch = 0;
  if (absl::Status s = StartExport(request, &model, &epoch); !s.ok()) {
    return s;
  }
  StateExport state_export(
      **engine, model, *options_.admission,
      ExportOptions(epoch, deadline, std::move(cancelled)));
  // What would end this rank's export before its gathers (the step, its
  // memory) is decided before it joins: after "go" its peers would wait in
  // the gathers.
  absl::StatusOr<ExportAdmission> admitted = state_export.Admit(request);
  if (!admitted.ok()) return admitted.status();
  // Only a FULL export with F > 1 gathers: with F = 1 rank 0 writes from
  // its own buffers and the others have nothing to do.
  if (request.layout() == v1::EXPORT_LAYOUT_FULL &&
      (*engine)->config().plan.sharding_factor() > 1) {
    return CollectiveExport(request, deadline, **engine, epoch, state_export,
                            *admitted);
  }
  return state_export.Run(request, deadline, *admitted);
}

// Exports run between steps; a FULL one (collective) only in a ready epoch,
// which becomes the operation's epoch. The model and the epoch to export.
absl::Status NodeManager::StartExport(const v1::ExportStateRequest& request,
                                      core::ModelConfig* model,
                                      int64_t* epoch) {
  absl::MutexLock lock(&mu_);
  if (!trainer_ops_->Idle()) {
    return absl::FailedPreconditionError(
        "a step is in progress (units gathered or reduced); export between "
        "steps");
  }
  *model = holder_.model();
  if (request.layout() == v1::EXPORT_LAYOUT_FULL) {
    if (!ReadyLocked()) {
      return absl::AbortedError("the daemon is not in a ready epoch");
    }
    op_epoch_ = comms_.epoch();
  }
  *epoch = comms_.epoch();
  return absl::OkStatus();
}

// The export's progress goes to the event log; a failed gather is handled
// as any collective's.
StateExport::Options NodeManager::ExportOptions(
    int64_t epoch, MonoTime deadline, std::function<bool()> cancelled) {
  StateExport::Options options;
  options.gather_timeout = OpTimeout(deadline);
  options.progress = [this, epoch](const v1::ExportProgress& progress) {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    *event.mutable_export_progress() = progress;
    events_.Append(std::move(event));
  };
  options.on_gather_error = [this](absl::Status status) {
    return OnCollectiveError("ExportState", std::move(status));
  };
  options.cancelled = std::move(cancelled);
  return options;
}

// A collective export: every rank agrees before the first gather that all
// take part (a rank that never calls ExportState fails it on every rank
// cleanly, instead of a gather timeout that reads as a failed peer), and
// every rank ends with rank 0's outcome, the writer's (ExportRendezvous).
absl::StatusOr<v1::ExportStateResponse> NodeManager::CollectiveExport(
    const v1::ExportStateRequest& request, MonoTime deadline,
    StepEngine& engine, int64_t epoch, StateExport& state_export,
    const ExportAdmission& admitted) {
  const EngineConfig& config = engine.config();
  const int64_t step = engine.committed_step();
  std::unique_ptr<comm::Store> store = StoreOfEpoch(epoch);
  ExportRendezvous rendezvous(
      *store, {.rank = config.rank,
               .world_size = static_cast<int>(config.plan.world_size()),
               .window = options_.collective_timeout,
               .attempt_id = nullptr,
               .record = &export_record_,
               .written = [&request](int64_t s) {
                 return FileHoldsFullExport(request, s);
               }});
  absl::StatusOr<ExportRendezvous::Agreement> agreed = rendezvous.Agree(step);
  if (!agreed.ok()) return agreed.status();
  if (*agreed == ExportRendezvous::Agreement::kWrittenBefore) {
    // This rank's earlier attempt ended without its outcome, and rank 0
    // wrote the file in it.
    v1::ExportStateResponse response;
    response.set_step(step);
    return response;
  }
  absl::StatusOr<v1::ExportStateResponse> ran =
      state_export.Run(request, deadline, admitted);
  if (absl::Status s = rendezvous.Conclude(step, ran.status(), deadline);
      !s.ok()) {
    return s;
  }
  return ran;
}

absl::Status NodeManager::ServeShard(
    const v1::FetchShardRequest& request, MonoTime deadline,
    const std::function<bool(const v1::FetchShardResponse&)>& send) {
  if (absl::Status s = ShardSource::CheckRequest(request); !s.ok()) return s;
  if (stop_.load()) return absl::UnavailableError("shutting down");
  // A consistent snapshot: no trainer operation (a Step) runs while the
  // shard streams. During recovery the epoch is not ready, so the wait is
  // short; it is bounded by the deadline all the same. Polled on the
  // monotonic clock: Abseil's timed lock waits on an absolute wall-clock
  // deadline, which a clock step stretches (see deadline_waker.h).
  absl::Mutex& op_mu = trainer_ops_->op_mutex();
  while (!op_mu.TryLock()) {
    if (MonoNow() >= deadline) {
      return absl::DeadlineExceededError(
          "FetchShard: a trainer operation held the daemon until the "
          "deadline");
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::Cleanup unlock = [&op_mu]()
                             ABSL_UNLOCK_FUNCTION(op_mu) { op_mu.Unlock(); };
  return shard_source_->Serve(request, deadline, send);
}

ShardSource::Snapshot NodeManager::ShardSnapshot() const {
  ShardSource::Snapshot snapshot;
  absl::MutexLock lock(&mu_);
  if (holder_.engine() == nullptr || !holder_.model_if_any().has_value())
    return snapshot;
  snapshot.engine = holder_.engine();
  DescribeShard(*holder_.engine(), holder_.model(), holder_.fingerprint(),
                &snapshot.header, &snapshot.sources);
  // A copy carries the agreement on, so that the replacement publishes it
  // as this node does.
  if (!holder_.agreement().empty() &&
      !snapshot.header.mutable_agreement()->ParseFromString(
          holder_.agreement())) {
    snapshot.header.clear_agreement();
  }
  snapshot.header.set_registration_state(holder_.registration_state());
  return snapshot;
}

std::shared_ptr<comm::Collective> NodeManager::ReplicaGroupOf(
    int64_t epoch, MonoTime deadline) {
  absl::MutexLock lock(&mu_);
  // Our epoch thread may still be building it (the requester's is built, so
  // ours is connected or moments away). Await re-checks at every unlock.
  const auto built = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return comms_.epoch() >= epoch;
  };
  AwaitUntil(&mu_, absl::Condition(&built), deadline);
  return comms_.ReplicaGroupOf(epoch);
}

void NodeManager::WriteCheckpoint(int64_t step, int64_t epoch) {
  if (checkpoints_->enabled())
    checkpoints_->Write(ShardSnapshot(), step, epoch);
}

absl::StatusOr<int64_t> NodeManager::RestoreCheckpointOf(int64_t step,
                                                         int64_t epoch) {
  std::shared_ptr<StepEngine> engine;
  std::optional<core::ModelConfig> model;
  int world = 0, factor = 0;
  {
    absl::MutexLock lock(&mu_);
    engine = holder_.engine();
    if (engine != nullptr) model = holder_.model_if_any();
    world = world_size_;
    factor = sharding_factor_;
  }
  const int rank = client_->rank();
  absl::StatusOr<ShardCheckpoints::Restore> restore = checkpoints_->Prepare(
      rank, step, std::move(engine), model, [&](const core::ModelConfig& m) {
        return CreateZeroedEngine(m, world, factor);
      });
  if (!restore.ok()) return restore.status();
  // Trainer operations wait while the state is overwritten.
  absl::MutexLock op(&trainer_ops_->op_mutex());
  absl::StatusOr<int64_t> restored = checkpoints_->Read(*restore);
  if (!restored.ok()) {
    // A live engine's state is garbage now: no collective may use it
    // until a restore succeeds (a fresh engine is simply dropped).
    if (!restore->fresh) {
      absl::MutexLock lock(&mu_);
      comms_.MarkFailed(restored.status().ToString());
    }
    return restored.status();
  }
  {
    absl::MutexLock lock(&mu_);
    if (restore->fresh) {
      // A checkpoint does not say what the model was registered with.
      InstallEngineLocked(restore->engine, restore->model, restore->fingerprint,
                          /*agreement=*/"");
    } else {
      holder_.ForgetRegistration();
      trainer_ops_->EngineInstalled();
    }
  }
  std::printf("shardd rank %d restored its checkpoint of step %lld from %s\n",
              rank, static_cast<long long>(*restored), restore->path.c_str());
  std::fflush(stdout);
  if (options_.observer != nullptr) options_.observer->CheckpointRestored();
  ReportMemory(*restore->engine);
  LogCommit(recovery::CommitRecord::Kind::kCheckpointRestored, *restored,
            epoch);
  return *restored;
}

void NodeManager::CountAbort(absl::string_view reason) {
  trainer_ops_->CountAbort(reason);
}

void NodeManager::ReportMemory(const StepEngine& engine) const {
  if (options_.observer == nullptr) return;
  const core::MemoryBreakdown held = engine.held_memory();
  metrics::ShardBytes bytes;
  bytes.parameters = held.parameter_shard_bytes;
  bytes.lowp_parameters = held.lowp_parameter_shard_bytes;
  bytes.gradients = held.gradient_shard_bytes;
  bytes.optimizer_state = held.optimizer_state_bytes;
  bytes.gathered = held.gathered_parameter_bytes;
  bytes.planned = engine.planned_memory().total_bytes;
  options_.observer->MemoryHeld(bytes);
}

absl::Status NodeManager::RecoverFromReplicas(int64_t epoch,
                                              const v1::ShardTransfer& plan) {
  int world = 0, factor = 0;
  {
    absl::MutexLock lock(&mu_);
    recovering_ = true;
    world = world_size_;
    factor = sharding_factor_;
  }
  absl::StatusOr<bool> copied = shard_copy_->Run(epoch, plan, world, factor);
  absl::MutexLock lock(&mu_);
  recovering_ = false;
  if (!copied.ok()) return copied.status();
  recovery_done_ = true;
  // Nothing to copy (the replicas hold no model yet) keeps an earlier error.
  if (*copied) recovery_error_.clear();
  return absl::OkStatus();
}

void NodeManager::InstallCopiedEngine(std::shared_ptr<StepEngine> engine,
                                      core::ModelConfig model,
                                      uint64_t fingerprint,
                                      const v1::ShardHeader& header,
                                      int64_t epoch) {
  {
    absl::MutexLock lock(&mu_);
    InstallEngineLocked(engine, std::move(model), fingerprint,
                        header.has_agreement()
                            ? header.agreement().SerializeAsString()
                            : std::string());
    // A copy of what the source registered is what registering makes.
    if (header.registration_state()) holder_.NoteRegistered();
  }
  ReportMemory(*engine);
  LogCommit(recovery::CommitRecord::Kind::kRecovered, header.step(), epoch);
}

void NodeManager::InstallEngineLocked(std::shared_ptr<StepEngine> engine,
                                      core::ModelConfig model,
                                      uint64_t fingerprint,
                                      std::string agreement) {
  holder_.Install(std::move(engine), std::move(model), fingerprint,
                  std::move(agreement), comms_);
  trainer_ops_->EngineInstalled();
}

bool NodeManager::DropPendingAt(int64_t step, int64_t epoch) {
  std::shared_ptr<StepEngine> engine;
  {
    absl::MutexLock lock(&mu_);
    engine = holder_.engine();
  }
  if (engine == nullptr || !engine->pending_step().has_value() ||
      engine->committed_step() != step) {
    return false;
  }
  const int64_t pending = *engine->pending_step();
  engine->DropPending();
  std::printf(
      "shardd rank %d: in-doubt step %lld dropped: epoch %lld rolls every "
      "rank back to step %lld, which this shard holds\n",
      client_->rank(), static_cast<long long>(pending),
      static_cast<long long>(epoch), static_cast<long long>(step));
  std::fflush(stdout);
  return true;
}

void NodeManager::ResolvePendingStep(const coordinator::MembershipView& view) {
  std::shared_ptr<StepEngine> engine;
  {
    absl::MutexLock lock(&mu_);
    engine = holder_.engine();
  }
  if (engine == nullptr) return;
  const std::optional<int64_t> pending = engine->pending_step();
  if (!pending.has_value()) return;
  if (!recovery::InDoubtStepWasCommitted(*pending, client_->rank(),
                                         view.committed_step, view.members)) {
    engine->DropPending();
    std::printf(
        "shardd rank %d: in-doubt step %lld dropped: no member of epoch %lld "
        "committed it; it is redone\n",
        client_->rank(), static_cast<long long>(*pending),
        static_cast<long long>(view.epoch));
    std::fflush(stdout);
    return;
  }
  absl::StatusOr<StepResult> applied = engine->ApplyPending();
  if (!applied.ok()) {
    // Cannot happen short of a bug (the step was prepared and validated);
    // say so loudly: this member is now a step behind the others.
    std::fprintf(stderr, "shardd: applying in-doubt step %lld failed: %s\n",
                 static_cast<long long>(*pending),
                 applied.status().ToString().c_str());
    return;
  }
  std::printf(
      "shardd rank %d: in-doubt step %lld applied: another member of epoch "
      "%lld committed it\n",
      client_->rank(), static_cast<long long>(applied->step),
      static_cast<long long>(view.epoch));
  std::fflush(stdout);
  commits_->Committed(*engine, applied->step, applied->grad_norm, view.epoch);
  export_record_.NoteCommitted();
  absl::MutexLock lock(&mu_);
  v1::StepResponse response;
  response.set_committed_step(applied->step);
  response.set_epoch(view.epoch);
  response.set_grad_norm(applied->grad_norm);
  response.set_clip_scale(applied->clip_scale);
  response.set_learning_rate(engine->learning_rate());
  // As after a Step (the abort count too: the next attempt is a new step).
  trainer_ops_->NoteCommitted(response);
}

void NodeManager::PrepareEngine(const v1::ShardTransfer& plan, int world,
                                int factor) {
  shard_copy_->Prepare(plan, world, factor);
}

absl::Status NodeManager::WatchEvents(
    const v1::WatchEventsRequest& request, MonoTime deadline,
    const std::function<bool(const v1::TrainerEvent&)>& send,
    const std::function<bool()>& cancelled) {
  if (request.after_sequence() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "after_sequence: must be >= 0, got ", request.after_sequence()));
  }
  int64_t after = request.after_sequence();
  const int64_t oldest = events_.oldest_sequence();
  const int64_t last = events_.last_sequence();
  // Resume only when nothing after `after` was dropped; else a snapshot.
  const bool resumable =
      after > 0 && after <= last && (oldest == 0 || after >= oldest - 1);
  if (!resumable) {
    v1::TrainerEvent snapshot;
    snapshot.set_sequence(last);
    snapshot.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
    *snapshot.mutable_snapshot() = GetStatus();
    snapshot.set_epoch(snapshot.snapshot().epoch());
    if (!send(snapshot)) return absl::CancelledError("the watcher went away");
    after = last;
  }
  while (true) {
    if (cancelled()) return absl::CancelledError("the watcher cancelled");
    const MonoTime now = MonoNow();
    if (now >= deadline) {
      return absl::DeadlineExceededError("WatchEvents: deadline reached");
    }
    std::vector<v1::TrainerEvent> fresh;
    // Wake at least twice a second to notice a cancelled watcher.
    const bool open = events_.WaitAfter(
        after, std::min(deadline, now + absl::Milliseconds(500)), &fresh);
    for (const v1::TrainerEvent& event : fresh) {
      if (!send(event)) return absl::CancelledError("the watcher went away");
      after = event.sequence();
    }
    if (!open) return absl::UnavailableError("the daemon is shutting down");
  }
}

v1::GetStatusResponse NodeManager::GetStatus() const {
  v1::GetStatusResponse status;
  const coordinator::MembershipView view = client_->view();
  AddPeerReachability(&status);
  if (options_.shm_usage) {
    const auto [leftover, swept] = options_.shm_usage();
    status.set_shm_leftover_bytes(leftover);
    status.set_shm_swept_bytes(swept);
  }
  absl::MutexLock lock(&mu_);
  status.set_rank(client_->rank());
  status.set_epoch(comms_.epoch());
  const bool ready = ReadyLocked();
  status.set_ready(ready);
  status.set_member_state(ready         ? v1::MEMBER_STATE_READY
                          : recovering_ ? v1::MEMBER_STATE_RECOVERING
                                        : v1::MEMBER_STATE_JOINING);
  *status.mutable_topology() = TopologyLocked();
  status.set_device(device_memory_ ? v1::DEVICE_KIND_CUDA
                                   : v1::DEVICE_KIND_CPU);
  status.set_recovery_phase(
      recovering_ ? v1::RECOVERY_PHASE_TRANSFERRING_STATE
      : (!recovery_error_.empty() && holder_.engine() == nullptr)
          ? v1::RECOVERY_PHASE_UNRECOVERABLE
          : v1::RECOVERY_PHASE_COMPLETE);
  status.set_version("shardd v1 (CPU data plane)");
  status.set_job_state(absl::IsDataLoss(view.error) ? v1::JOB_STATE_FAILED
                                                    : v1::JOB_STATE_RUNNING);
  if (absl::IsDataLoss(view.error)) {
    status.set_job_failure(std::string(view.error.message()));
  }
  status.set_registered(holder_.engine() != nullptr);
  if (holder_.engine() != nullptr) {
    status.set_committed_step(holder_.engine()->committed_step());
    status.set_model_fingerprint(holder_.fingerprint());
    *status.mutable_memory() = MemoryReportLocked();
  }
  for (int u : trainer_ops_->HeldUnits()) status.add_gathered_units(u);
  AddCollectiveStatsLocked(&status);
  return status;
}

// What the reachability prober knows of every peer (it has its own lock).
void NodeManager::AddPeerReachability(v1::GetStatusResponse* status) const {
  if (reachability_ == nullptr) return;
  for (const PeerProbeState& p : reachability_->Peers()) {
    v1::PeerReachabilityStatus* out = status->add_peers();
    out->set_rank(p.rank);
    out->set_peer_address(p.address);
    out->set_incarnation(p.incarnation);
    out->set_consecutive_failures(p.consecutive_failures);
    out->set_probes_answered(p.probes_answered);
    out->set_last_error(p.last_error);
    out->set_reported_unreachable(p.reported);
  }
}

// The counters of the epoch's shard and replica groups, those it has.
void NodeManager::AddCollectiveStatsLocked(
    v1::GetStatusResponse* status) const {
  const std::pair<v1::ProcessGroup, const comm::Collective*> groups[] = {
      {v1::PROCESS_GROUP_SHARD, comms_.shard_group().get()},
      {v1::PROCESS_GROUP_REPLICA, comms_.replica_group().get()}};
  for (const auto& [group, collective] : groups) {
    if (collective == nullptr) continue;
    for (v1::CollectiveStats& entry : ProtoConvert::CollectiveStatsToProto(
             group, collective->size(), collective->Stats())) {
      *status->add_collectives() = std::move(entry);
    }
  }
}

v1::ProbeResponse NodeManager::Probe(bool include_model) {
  // A replacement about to copy this daemon's shard asks for the model:
  // the copy's piece CRCs are computed now, in the background.
  if (include_model) shard_source_->StartPrecompute();
  v1::ProbeResponse probe;
  absl::MutexLock lock(&mu_);
  probe.set_rank(client_->rank());
  probe.set_epoch(comms_.epoch());
  probe.set_committed_step(
      holder_.engine() != nullptr ? holder_.engine()->committed_step() : 0);
  probe.set_state(ReadyLocked() ? v1::MEMBER_STATE_READY
                  : recovering_ ? v1::MEMBER_STATE_RECOVERING
                                : v1::MEMBER_STATE_JOINING);
  probe.set_registered(holder_.engine() != nullptr);
  probe.set_incarnation(client_->incarnation());
  if (include_model && holder_.engine() != nullptr &&
      holder_.model_if_any().has_value()) {
    *probe.mutable_model() = ProtoConvert::ModelToProto(holder_.model());
    probe.set_model_fingerprint(holder_.fingerprint());
  }
  return probe;
}

}  // namespace shardd::node
