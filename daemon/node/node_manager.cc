#include "daemon/node/node_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>
#include <variant>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/comm/coordinator_store/coordinator_store.h"
#include "daemon/coordinator/member_client.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/rendezvous_key.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/tensor_init.h"
#include "daemon/memory/cuda_ipc_name.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/node/cpu_engine_backend.h"
#include "daemon/node/device_init_support.h"
#include "daemon/node/engine_shard_memory.h"
#include "daemon/node/export_rendezvous.h"
#include "daemon/node/group_spec.h"
#include "daemon/node/init_materializer.h"
#include "daemon/node/model_digest.h"
#include "daemon/node/observed_collective.h"
#include "daemon/node/plan_action.h"
#include "daemon/node/proto_convert.h"
#include "daemon/node/shared_memory_init_reader.h"
#include "daemon/node/state_export.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/recovery/in_doubt_step.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "daemon/recovery/shard_stream.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/state/state_import.h"

namespace shardd::node {
namespace {

// The Send/Recv tag of a shard copy's pieces on the replica group (no other
// point-to-point traffic uses that communicator).
constexpr uint32_t kShardTransferTag = 0x53484344;  // "SHCD"

// Waits for every work (they end at their deadline or at the abort that
// precedes this call), so that no operation still touches its buffer.
void WaitAll(const std::vector<std::shared_ptr<comm::Work>>& works) {
  for (const std::shared_ptr<comm::Work>& work : works) (void)work->Wait();
}

// The unit field of Gather, Release and ReduceGrad (trainer.proto:
// INVALID_ARGUMENT for a unit out of range).
absl::Status CheckUnitIndex(int unit, int units) {
  if (unit < 0 || unit >= units) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit: ", unit, " is out of range (the model has ", units, " units)"));
  }
  return absl::OkStatus();
}

bool IsCollectiveFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
         absl::IsAborted(s) || absl::IsCancelled(s) || absl::IsInternal(s) ||
         absl::IsUnknown(s);
}

v1::DType ToProtoDType(core::DType d) { return static_cast<v1::DType>(d); }

uint32_t Crc32c(uint32_t crc, const uint8_t* data, size_t n) {
  return core::Crc32cExtend(crc, data, n);
}

v1::ShardSectionKind ToSectionKind(StepEngine::StateKind kind) {
  switch (kind) {
    case StepEngine::StateKind::kParameters:
      return v1::SHARD_SECTION_KIND_PARAMETERS;
    case StepEngine::StateKind::kExpAvg:
      return v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG;
    case StepEngine::StateKind::kExpAvgSq:
      return v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG_SQ;
    case StepEngine::StateKind::kMomentum:
      return v1::SHARD_SECTION_KIND_SGD_MOMENTUM;
  }
  return v1::SHARD_SECTION_KIND_UNSPECIFIED;
}

// The learning rate and model fingerprint of a step, which every rank's
// vote must agree on.
uint64_t StepFingerprint(uint64_t model_fingerprint, double lr) {
  uint64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(lr));
  std::memcpy(&bits, &lr, sizeof(lr));
  uint64_t h = model_fingerprint ^ 0x9E3779B97F4A7C15ull;
  h ^= bits + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

NodeManager::NodeManager(NodeOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<NodeManager>> NodeManager::Start(
    NodeOptions options) {
  if (options.identity.empty()) {
    return absl::InvalidArgumentError("identity: required");
  }
  std::unique_ptr<NodeManager> m(new NodeManager(options));
  if (!options.commit_log_path.empty()) {
    absl::StatusOr<std::unique_ptr<recovery::CommitLog>> log =
        recovery::CommitLog::Open(options.commit_log_path);
    if (!log.ok()) return log.status();
    m->commit_log_ = std::move(*log);
  }
  m->backend_ = options.backend != nullptr
                    ? options.backend
                    : std::make_shared<CpuEngineBackend>(options.shm_dir,
                                                         options.shm_prefix);
  m->device_memory_ = m->backend_->math()->device_memory();
  m->shard_memory_ = std::make_unique<EngineShardMemory>(m->backend_->math());
  coordinator::MemberClientOptions mo;
  mo.coordinator_address = options.coordinator_address;
  mo.credentials = options.coordinator_credentials;
  mo.rank = options.rank;
  mo.identity = options.identity;
  mo.peer_address = options.peer_address;
  mo.initial_join_timeout = options.initial_join_timeout;
  mo.info["pid"] = absl::StrCat(getpid());
  NodeManager* self = m.get();
  mo.shard_status = [self] {
    coordinator::MemberShardStatus status;
    // Never blocks on a collective: mu_ is only held briefly.
    absl::MutexLock lock(&self->mu_);
    if (self->engine_ != nullptr) {
      status.holds_shard = true;
      status.committed_step = self->engine_->committed_step();
      status.model_fingerprint = self->fingerprint_;
      status.pending_step = self->engine_->pending_step().value_or(0);
    }
    return status;
  };
  // Checkpoints this daemon can vouch for: a rollback is planned only to a
  // step every rank holds intact. They are verified before the join (shardd
  // requires --rank with --checkpoint_dir), so the coordinator's first plan
  // knows them.
  m->catalog_ = std::make_unique<CheckpointCatalog>(options.checkpoint_dir);
  if (!options.checkpoint_dir.empty() && options.rank >= 0) {
    // A killed writer's temporary: never a checkpoint, only wasted space.
    absl::StatusOr<std::vector<std::string>> swept =
        recovery::RemoveDeadCheckpointTemporaries(options.checkpoint_dir,
                                                  options.rank);
    if (swept.ok()) {
      for (const std::string& path : *swept) {
        std::printf("shardd: removed a dead writer's checkpoint temporary %s\n",
                    path.c_str());
      }
    }
    m->catalog_->Scan(options.rank);
  }
  CheckpointCatalog* catalog = m->catalog_.get();
  mo.checkpoints = [catalog] { return catalog->Inventory(); };
  if (options.probe_peers &&
      options.peer_probing.interval > absl::ZeroDuration()) {
    m->reachability_ = std::make_unique<PeerReachability>(
        options.peer_probing, options.probe_peers,
        [self] {
          // The members of the current view this daemon exchanges data
          // with (client_ is set before the probing starts and reset after
          // it stops).
          std::vector<ProbeTarget> members;
          const coordinator::MembershipView view = self->client_->view();
          for (const v1::MemberInfo& m : view.members) {
            members.push_back({m.rank(), m.peer_address(), m.incarnation()});
          }
          return GroupPeers(view.rank, view.sharding_factor, members);
        },
        [self](const UnreachablePeerReport& peer, bool unreachable) {
          if (unreachable) {
            std::printf(
                "shardd rank %d: peer rank %d at %s unreachable (%d probes "
                "failed: %s); reported to the coordinator\n",
                self->client_->rank(), peer.rank, peer.address.c_str(),
                peer.failed_probes, peer.error.c_str());
          } else {
            std::printf("shardd rank %d: peer rank %d at %s reachable again\n",
                        self->client_->rank(), peer.rank, peer.address.c_str());
          }
          std::fflush(stdout);
        });
    PeerReachability* reachability = m->reachability_.get();
    mo.unreachable_peers = [reachability] {
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
  absl::StatusOr<std::unique_ptr<coordinator::MemberClient>> client =
      coordinator::MemberClient::Join(mo);
  if (!client.ok()) return client.status();
  m->client_ = std::move(*client);
  if (m->reachability_ != nullptr) m->reachability_->Start();
  m->epoch_thread_ = std::thread([self] { self->EpochLoop(); });
  return m;
}

NodeManager::~NodeManager() {
  stop_ = true;
  if (reachability_ != nullptr) reachability_->Stop();
  if (epoch_thread_.joinable()) epoch_thread_.join();
  // Probe (the only place that starts it) no longer runs: the peer server
  // is shut down before the manager goes.
  if (crc_thread_.joinable()) crc_thread_.join();
  client_.reset();
  absl::MutexLock lock(&mu_);
  engine_.reset();
  shard_group_.reset();
  replica_group_.reset();
}

void NodeManager::BeginShutdown() { stop_ = true; }

absl::Status NodeManager::Shutdown(absl::string_view reason) {
  stop_ = true;
  if (reachability_ != nullptr) reachability_->Stop();
  events_.Close();
  if (epoch_thread_.joinable()) epoch_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    if (shard_group_ != nullptr) shard_group_->Abort("node shutting down");
    if (replica_group_ != nullptr) replica_group_->Abort("node shutting down");
  }
  return client_->Leave(reason);
}

int NodeManager::rank() const { return client_->rank(); }

void NodeManager::EpochLoop() {
  int64_t handled = 0;
  int64_t seen = 0;
  bool job_failed = false;
  while (!stop_.load()) {
    absl::StatusOr<coordinator::MembershipView> view = client_->WaitFor(
        [handled, seen](const coordinator::MembershipView& v) {
          return v.epoch > handled && (v.AllLive() || v.epoch > seen);
        },
        MonoNow() + absl::Milliseconds(100));
    if (absl::IsDeadlineExceeded(view.status())) continue;
    if (absl::IsDataLoss(view.status()) && !job_failed) {
      // Terminal: no epoch follows. Collectives in flight return now, and
      // trainers hear why (WatchEvents, and DATA_LOSS from every call).
      job_failed = true;
      NoteJobFailed(view.status());
    }
    if (!view.ok()) {
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    if (view->epoch > seen) {
      seen = view->epoch;
      // The communicators belong to an older epoch: they are dead (a
      // member left, died or hung). Abort them at once so that a trainer
      // operation blocked in a collective with a hung peer returns now,
      // not at the collective timeout.
      {
        v1::TrainerEvent event;
        event.set_epoch(view->epoch);
        v1::EpochChanged* changed = event.mutable_epoch_changed();
        {
          absl::MutexLock lock(&mu_);
          changed->set_previous_epoch(comm_epoch_);
        }
        changed->set_epoch(view->epoch);
        changed->set_reason(view->reason);
        for (const v1::MemberInfo& m : view->members) {
          *changed->add_members() = m;
        }
        events_.Append(std::move(event));
      }
      absl::MutexLock lock(&mu_);
      if (comm_epoch_ < view->epoch) {
        const std::string why =
            absl::StrCat("epoch ", comm_epoch_, " superseded by ", view->epoch,
                         ": ", view->reason);
        if (!comm_failed_) {
          comm_failed_ = true;
          comm_error_ = why;
        }
        if (shard_group_ != nullptr) shard_group_->Abort(why);
        if (replica_group_ != nullptr) replica_group_->Abort(why);
      }
    }
    if (!view->AllLive()) continue;
    // Only the process that holds this rank's slot in the epoch builds its
    // communicators: one removed (cut off, or replaced while it hung) still
    // sees the epochs of its successor, and must not publish itself in
    // their rendezvous as that rank.
    if (!view->HeldBy(client_->rank(), client_->incarnation())) {
      handled = view->epoch;
      continue;
    }
    handled = view->epoch;
    {
      absl::MutexLock lock(&mu_);
      world_size_ = view->world_size;
      sharding_factor_ = view->sharding_factor;
    }
    // The coordinator's plan for this epoch, decided from the steps the
    // members hold: a copy from a replica, or a rollback to a checkpoint
    // every rank holds (verified), or nothing to do.
    const int rank = client_->rank();
    const PlanAction plan = PlanActionFor(view->plan, view->epoch, rank);
    if (!plan.issued) continue;  // No plan for every slot yet (or failed).
    // Before anything else of this epoch (communicators, serving a copy,
    // READY): a step left in doubt becomes applied or dropped, so that every
    // member is at the same step again. A rollback to the step this member
    // holds has it drop the in-doubt step instead (the plan counted on it).
    if (!plan.rollback || !DropPendingAt(plan.step, view->epoch)) {
      ResolvePendingStep(*view);
    }
    const std::optional<v1::ShardTransfer>& copy = plan.copy;
    if (plan.rollback) catalog_->AbandonAbove(rank, plan.step);
    if (plan.restore) {
      // Before the communicators: a fresh daemon creates its engine from
      // the checkpoint's model, and peers wait in the rendezvous meanwhile.
      SHARDD_FAILPOINT("recovery.before_install");
      absl::StatusOr<int64_t> restored =
          RestoreCheckpoint(plan.step, view->epoch);
      if (!restored.ok()) {
        const std::string why = absl::StrCat(
            "epoch ", view->epoch, ": rollback to the checkpoint of step ",
            plan.step, " failed: ", restored.status().ToString());
        {
          absl::MutexLock lock(&mu_);
          recovery_error_ = why;
        }
        std::fprintf(stderr, "shardd: %s\n", why.c_str());
        // The coordinator plans again without that checkpoint: it must
        // hear of it (the heartbeat) before the next epoch is planned.
        catalog_->NoteBad(plan.step, restored.status().ToString());
        (void)client_->SendHeartbeat();
        if (client_->view().epoch == view->epoch) {
          (void)client_->ReportFailure(-1, v1::FAILURE_KIND_TRANSFER_FAILED,
                                       why, view->epoch);
        }
        continue;
      }
      absl::MutexLock lock(&mu_);
      recovery_done_ = true;
    }
    // A replacement about to copy its shard builds its engine while the
    // communicators form.
    std::thread prepare;
    bool needs_copy = false;
    {
      absl::MutexLock lock(&mu_);
      needs_copy = copy.has_value() && engine_ == nullptr;
      if (copy.has_value() && engine_ != nullptr) {
        // The plan has this daemon copy although it holds an engine at
        // another step: it reports its real step and the coordinator plans
        // again from it.
        std::fprintf(stderr,
                     "shardd rank %d: epoch %lld plans a copy of step %lld "
                     "but this daemon holds step %lld\n",
                     rank, static_cast<long long>(view->epoch),
                     static_cast<long long>(plan.step),
                     static_cast<long long>(engine_->committed_step()));
      }
      if (needs_copy && !prepared_.has_value() &&
          copy->source_ranks_size() > 0) {
        prepare = std::thread([this, plan = *copy, world = view->world_size,
                               factor = view->sharding_factor] {
          PrepareEngine(plan, world, factor);
        });
      }
    }
    absl::Status built = BuildCommunicators(view->epoch, view->world_size,
                                            view->sharding_factor);
    if (prepare.joinable()) prepare.join();
    if (!built.ok()) {
      const std::string why = absl::StrCat(
          "epoch ", view->epoch, ": communicators: ", built.ToString());
      {
        absl::MutexLock lock(&mu_);
        comm_failed_ = true;
        comm_error_ = why;
      }
      // Nobody's lease runs out when communicators cannot be formed (a peer
      // unreachable, a transient connect or store error): unreported, the
      // job would sit un-ready in this epoch for good. Reported, every
      // member builds them again in the next one; no suspect is named, so
      // nobody is removed for it (a dead peer's lease runs out on its own).
      // A newer epoch under way makes the report stale, and it is dropped.
      if (client_->view().epoch == view->epoch) {
        (void)client_->ReportFailure(-1, v1::FAILURE_KIND_PEER_UNREACHABLE, why,
                                     view->epoch);
      }
      continue;
    }
    if (needs_copy) {
      SHARDD_FAILPOINT("recovery.before_install");
      absl::Status copied = RecoverFromReplicas(view->epoch, *copy);
      if (!copied.ok()) {
        absl::MutexLock lock(&mu_);
        recovery_error_ = copied.ToString();
        std::fprintf(stderr, "shardd: recovery in epoch %lld failed: %s\n",
                     static_cast<long long>(view->epoch),
                     copied.ToString().c_str());
        continue;
      }
      SHARDD_FAILPOINT("recovery.before_ready");
    }
    int64_t step = 0;
    {
      absl::MutexLock lock(&mu_);
      if (engine_ != nullptr) step = engine_->committed_step();
    }
    absl::Status ready = client_->SetReady(view->epoch, step);
    if (ready.ok()) {
      v1::TrainerEvent event;
      event.set_epoch(view->epoch);
      event.mutable_ready()->set_committed_step(step);
      events_.Append(std::move(event));
    }
    if (options_.observer != nullptr) {
      options_.observer->EpochChanged(view->epoch, ready.ok());
    }
    (void)ready;  // A failed READY heartbeat is retried by the next epoch.
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
  comm::CoordinatorStoreOptions so;
  so.rank = rank;
  so.lease_token =
      client_->SettledLeaseToken(MonoNow() + options_.connect_timeout);
  so.credentials = options_.coordinator_credentials;
  std::unique_ptr<comm::CoordinatorStore> store =
      comm::CoordinatorStore::Connect(options_.coordinator_address, epoch, so);
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
    shard_group_ = shard_group;
    replica_group_ = replica_group;
    comm_epoch_ = epoch;
    comm_failed_ = false;
    comm_error_.clear();
    // A step in progress when the old epoch broke is abandoned: the trainer
    // redoes it (after WaitReady) from its first ReduceGrad.
    reduced_.clear();
    accumulated_.clear();
    ops_in_step_ = 0;
    abort_counted_ = false;
    engine = engine_;
  }
  if (engine != nullptr) engine->SetCommunicators(shard_group, replica_group);
  return absl::OkStatus();
}

bool NodeManager::ReadyLocked() const {
  // The coordinator's readiness too: a replacement may still be copying
  // its shard, and collectives with it would wait for nothing.
  const coordinator::MembershipView view = client_->view();
  return comm_epoch_ > 0 && !comm_failed_ && view.epoch == comm_epoch_ &&
         view.ready;
}

void NodeManager::NoteJobFailed(const absl::Status& why) {
  std::printf("shardd rank %d: the job has failed: %s\n", client_->rank(),
              std::string(why.message()).c_str());
  std::fflush(stdout);
  int64_t step = -1;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shard_group_ != nullptr)
      shard_group_->Abort(std::string(why.message()));
    if (replica_group_ != nullptr) {
      replica_group_->Abort(std::string(why.message()));
    }
    if (engine_ != nullptr) step = engine_->committed_step();
    epoch = comm_epoch_;
  }
  // The last committed step and its checksum, for the record: this shard
  // is intact and nothing after it is half-written. Trainer operations are
  // done (their collectives were just aborted) before the state is read.
  if (step >= 0) {
    absl::MutexLock op(&op_mu_);
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
      if (ReadyLocked() && comm_epoch_ >= min_epoch) return comm_epoch_;
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
          "not in a ready epoch (communicators of epoch ", comm_epoch_,
          comm_failed_ ? absl::StrCat(" failed: ", comm_error_) : "",
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
  if (engine_ == nullptr) {
    return absl::FailedPreconditionError(
        "no model registered: call RegisterModel first");
  }
  return engine_;
}

absl::Duration NodeManager::OpTimeout(MonoTime deadline) const {
  // Collectives are matched across ranks, so they run to the daemon's
  // collective timeout even when the caller's deadline is shorter.
  (void)deadline;
  return options_.collective_timeout;
}

absl::Status NodeManager::OnCollectiveError(absl::string_view what,
                                            absl::Status status) {
  if (!IsCollectiveFailure(status)) return status;
  CountAbort(metrics::node_labels::kPeerFailure);
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
      if (engine_ != nullptr) aborted->set_step(engine_->committed_step() + 1);
    }
    aborted->set_reason(absl::StrCat(what, ": ", status.message()));
    events_.Append(std::move(event));
  }
  AbandonEpoch(absl::StrCat(what, ": ", status.message()),
               absl::IsDeadlineExceeded(status)
                   ? v1::FAILURE_KIND_COLLECTIVE_TIMEOUT
                   : v1::FAILURE_KIND_COLLECTIVE_FAILED,
               epoch);
  return absl::AbortedError(absl::StrCat(
      what, " failed in epoch ", epoch, ": ", status.ToString(),
      "; wait for the next ready epoch (WaitReady) and redo the step"));
}

void NodeManager::AbandonEpoch(absl::string_view why, v1::FailureKind kind,
                               int64_t epoch) {
  int world = 0;
  {
    absl::MutexLock lock(&mu_);
    if (epoch != comm_epoch_) return;  // Already replaced.
    const bool already = comm_failed_;
    comm_failed_ = true;
    if (!already) comm_error_ = std::string(why);
    world = world_size_;
    if (shard_group_ != nullptr) shard_group_->Abort(why);
    if (replica_group_ != nullptr) replica_group_->Abort(why);
  }
  // With two ranks the culprit is known: the other one. Otherwise the
  // coordinator starts a new epoch without removing anyone; a dead peer's
  // lease runs out on its own.
  const int suspect = world == 2 ? 1 - client_->rank() : -1;
  (void)client_->ReportFailure(suspect, kind, why, epoch);
}

void NodeManager::LogCommit(recovery::CommitRecord::Kind kind, int64_t step,
                            int64_t epoch) {
  if (commit_log_ == nullptr) return;
  std::shared_ptr<StepEngine> engine;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
  }
  if (engine == nullptr) return;
  uint32_t crc = 0;
  for (const StepEngine::StateSection& section : engine->StateSections()) {
    absl::Status s =
        ReadEngineMemory(engine->math(), section.data, section.bytes,
                         [&](const uint8_t* p, int64_t n) {
                           crc = Crc32c(crc, p, static_cast<size_t>(n));
                           return absl::OkStatus();
                         });
    if (!s.ok()) {
      std::fprintf(stderr, "shardd: commit log: %s\n", s.ToString().c_str());
      return;
    }
  }
  const EngineConfig& config = engine->config();
  recovery::CommitRecord record;
  record.kind = kind;
  record.step = step;
  record.epoch = epoch;
  record.rank = config.rank;
  record.shard_index = config.rank % config.plan.sharding_factor();
  record.shard_crc32c = crc;
  if (absl::Status s = commit_log_->Append(record); !s.ok()) {
    std::fprintf(stderr, "shardd: commit log: %s\n", s.ToString().c_str());
  }
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
  if (engine_ == nullptr) return report;
  *report.mutable_planned() =
      ProtoConvert::MemoryToProto(engine_->planned_memory());
  // What the engine's buffers hold, per category.
  *report.mutable_held() = ProtoConvert::MemoryToProto(engine_->held_memory());
  const EngineConfig& config = engine_->config();
  const int shard_index = client_->rank() % config.plan.sharding_factor();
  for (size_t u = 0; u < config.units.size(); ++u) {
    const core::UnitLayout& layout = config.units[u];
    v1::UnitMemory* um = report.add_units();
    um->set_unit(u);
    um->set_name(model_.has_value() ? model_->units[u].name : "");
    um->set_numel(layout.numel());
    um->set_padded_numel(layout.padded_numel());
    um->set_shard_offset(layout.shard(shard_index).offset);
    um->set_shard_numel(layout.shard(shard_index).numel);
    um->set_shard_padding(layout.shard(shard_index).padding);
  }
  return report;
}

v1::DataRef NodeManager::MakeRef(const UnitData& data, int unit) const {
  v1::DataRef ref;
  // A device backend's buffers are GPU memory exported by CUDA IPC; the
  // CPU backend's are shared-memory segments.
  if (absl::StatusOr<memory::CudaIpcName> ipc =
          memory::ParseCudaIpcName(data.buffer->name());
      ipc.ok()) {
    auto* cuda = ref.mutable_cuda_ipc();
    cuda->set_mem_handle(ipc->mem_handle);
    cuda->set_device_ordinal(ipc->device);
    cuda->set_pci_bus_id(backend_->pci_bus_id());
    cuda->set_allocation_bytes(data.buffer->size());
    cuda->set_byte_offset(data.offset);
    cuda->set_byte_length(data.bytes);
  } else {
    auto* shm = ref.mutable_shared_memory();
    shm->set_path(data.buffer->name());
    shm->set_segment_bytes(data.buffer->size());
    shm->set_byte_offset(data.offset);
    shm->set_byte_length(data.bytes);
  }
  ref.set_dtype(ToProtoDType(data.dtype));
  ref.set_byte_length(data.bytes);
  const std::vector<core::TensorView>& tensors =
      engine_->config().units[unit].tensors();
  const int64_t elem = core::DTypeSize(data.dtype);
  for (size_t t = 0; t < tensors.size(); ++t) {
    v1::TensorView* view = ref.add_views();
    view->set_name(tensors[t].name);
    for (int64_t d : tensors[t].shape) view->add_shape(d);
    view->set_dtype(ToProtoDType(data.dtype));
    view->set_byte_offset(tensors[t].offset * elem);
    view->set_numel(tensors[t].numel);
  }
  return ref;
}

// Prefixes a rank's model key after its exchange failed (a serialized
// ModelAgreement never starts with it: 'f' is no field tag of it).
constexpr char kFailedModel[] = "failed:";

std::unique_ptr<comm::CoordinatorStore> NodeManager::StoreOfEpoch(
    int64_t epoch) {
  comm::CoordinatorStoreOptions so;
  so.rank = client_->rank();
  so.lease_token =
      client_->SettledLeaseToken(MonoNow() + options_.connect_timeout);
  so.credentials = options_.coordinator_credentials;
  return comm::CoordinatorStore::Connect(options_.coordinator_address, epoch,
                                         so);
}

absl::Status NodeManager::ExchangeModel(int64_t epoch,
                                        const v1::ModelAgreement& agreement,
                                        MonoTime deadline) {
  const int rank = client_->rank();
  int world = 0;
  {
    absl::MutexLock lock(&mu_);
    world = world_size_;
  }
  std::unique_ptr<comm::CoordinatorStore> store = StoreOfEpoch(epoch);
  // The others' keys as this attempt begins (see below).
  std::vector<std::string> before(world);
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    absl::StatusOr<std::string> v = store->Get(core::ModelKey(r));
    if (v.ok()) {
      before[r] = *std::move(v);
    } else if (!absl::IsNotFound(v.status())) {
      return v.status();
    }
  }
  if (absl::Status s =
          store->Set(core::ModelKey(rank), agreement.SerializeAsString());
      !s.ok()) {
    return s;
  }
  // A failed exchange marks this rank's key failed (keeping its model), so
  // that a rank registering again in this epoch does not take it for a
  // current registration: a failed key that was there before this attempt
  // began is waited past; a failed key written during it still counts as a
  // mismatch when its model differs (the two ranks' attempts met), and is
  // waited past when it agrees (that rank failed against a third). Only an
  // unmarked, agreeing key is agreement.
  const std::string mine = agreement.SerializeAsString();
  auto mark_failed = absl::MakeCleanup([&store, rank, &mine] {
    (void)store->Set(core::ModelKey(rank), absl::StrCat(kFailedModel, mine));
  });
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    const std::string key = core::ModelKey(r);
    std::string seen = before[r];  // Waited past when failed.
    while (true) {
      absl::Status waited = store->Wait(
          {key}, std::max(deadline - MonoNow(), absl::Milliseconds(1)));
      if (absl::IsDeadlineExceeded(waited)) {
        return absl::DeadlineExceededError(
            absl::StrCat("waiting for every rank to register the model: ",
                         waited.message()));
      }
      if (!waited.ok()) return waited;
      absl::StatusOr<std::string> theirs = store->Get(key);
      if (!theirs.ok()) return theirs.status();
      const bool failed = absl::StartsWith(*theirs, kFailedModel);
      if (!failed || *theirs != seen) {
        v1::ModelAgreement other;
        if (!other.ParseFromString(
                failed ? theirs->substr(sizeof(kFailedModel) - 1) : *theirs)) {
          return absl::InternalError(
              absl::StrCat("rank ", r, "'s model is corrupt"));
        }
        if (absl::Status same = ModelDigest::Compare(agreement, other, r);
            !same.ok()) {
          return same;
        }
        if (!failed) break;  // Agreed.
        seen = *theirs;      // Agrees but failed: wait for its next attempt.
      }
      if (MonoNow() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "waiting for every rank to register the model: rank ", r,
            "'s last registration failed and it has not registered again"));
      }
      SleepUntil(MonoNow() + absl::Milliseconds(5));
    }
  }
  std::move(mark_failed).Cancel();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StepEngine>> NodeManager::CreateEngine(
    const core::ModelConfig& model, int world, int factor,
    const ShardInitializer& init) {
  absl::StatusOr<core::ShardPlan> plan = core::ShardPlan::Create(
      world, model.config.strategy, model.config.sharding_factor);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(model, factor);
  if (!layouts.ok()) return layouts.status();
  OptimizerSpec optimizer;
  if (const auto* a =
          std::get_if<core::AdamWOptions>(&model.config.optimizer)) {
    optimizer.kind = core::OptimizerKind::kAdamW;
    optimizer.adamw = *a;
  } else {
    const auto& s = std::get<core::SgdOptions>(model.config.optimizer);
    optimizer.kind = s.momentum != 0.0 ? core::OptimizerKind::kSgdMomentum
                                       : core::OptimizerKind::kSgd;
    optimizer.sgd = s;
  }
  EngineConfig config{.rank = client_->rank(),
                      .plan = *plan,
                      .units = *layouts,
                      .reduce_dtype = core::ToMemoryOptions(model).reduce_dtype,
                      .optimizer = optimizer,
                      .max_grad_norm = model.config.max_grad_norm,
                      .max_gathered_units = model.config.max_gathered_units,
                      .exclude_from_weight_decay = {},
                      .comm_scratch = backend_->comm_scratch()};
  for (const core::UnitConfig& unit : model.units) {
    std::vector<bool>& excluded =
        config.exclude_from_weight_decay.emplace_back();
    for (const core::TensorConfig& tensor : unit.tensors) {
      excluded.push_back(tensor.exclude_from_weight_decay);
    }
  }
  if (absl::Status s = options_.admission->AdmitModel(
          "allocating the engine", model, world, client_->rank());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<StepEngine>> engine =
      StepEngine::Create(std::move(config), init, backend_->shared(),
                         backend_->private_memory(), backend_->math());
  if (engine.ok()) {
    (*engine)->SetGrowthAdmission(options_.admission->ForEngineGrowth());
  }
  return engine;
}

absl::StatusOr<v1::RegisterModelResponse> NodeManager::RegisterModel(
    const v1::RegisterModelRequest& request, MonoTime deadline) {
  if (request.transport() == v1::TRANSPORT_CUDA_IPC && !device_memory_) {
    return absl::InvalidArgumentError(
        "transport: CUDA IPC needs a CUDA device; this daemon runs on the "
        "CPU (shared memory)");
  }
  if (request.transport() == v1::TRANSPORT_SHARED_MEMORY && device_memory_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transport: this daemon keeps its buffers on ", backend_->name(),
        " (CUDA IPC); shared memory is the CPU backend's"));
  }
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(request.model());
  if (!model.ok()) return model.status();
  if (absl::Status s = DeviceInitSupport::CheckBackend(*model, device_memory_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = options_.admission->AdmitInitCopy(*model); !s.ok()) {
    return s;
  }
  // Wait for the coordinator's topology (W and F) and a ready epoch, and
  // only then take op_mu_: a replacement's epoch becomes ready after its
  // epoch thread restored a checkpoint, which takes op_mu_ (a trainer that
  // re-attached early would otherwise hold it until its deadline).
  absl::StatusOr<int64_t> epoch = WaitUntilReady(deadline, 0);
  absl::MutexLock op(&op_mu_);
  int world = 0, factor = 0;
  {
    absl::MutexLock lock(&mu_);
    world = world_size_;
    factor = sharding_factor_;
    if (engine_ != nullptr) {
      absl::Status same =
          core::CompareModels(*model_, *model, core::InitScope::kExclude);
      if (!same.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model differs from the one this daemon holds (held vs new): "
            "model.",
            same.message()));
      }
      // A new trainer process: what the old one held is released, and a
      // step it left half-way (peers wait in collectives it will never
      // issue) is abandoned with the epoch, so that every rank redoes it.
      for (int u : held_) (void)engine_->Release(u);
      held_.clear();
      if (ops_in_step_ > 0) {
        ops_in_step_ = 0;
        const int64_t epoch_now = comm_epoch_;
        mu_.Unlock();
        AbandonEpoch("the trainer re-attached in the middle of a step",
                     v1::FAILURE_KIND_PROCESS_EXITED, epoch_now);
        mu_.Lock();
      }
      v1::RegisterModelResponse response;
      response.set_committed_step(engine_->committed_step());
      response.set_epoch(comm_epoch_);
      response.set_reattached(true);
      *response.mutable_topology() = TopologyLocked();
      *response.mutable_memory() = MemoryReportLocked();
      response.set_model_fingerprint(fingerprint_);
      return response;
    }
  }
  if (!epoch.ok()) {
    if (world == 0) {
      return absl::UnavailableError(
          "the coordinator has not formed an epoch yet (W unknown)");
    }
    return epoch.status();
  }
  if (absl::Status s = core::Validate(*model, world); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("model.", s.message()));
  }
  absl::StatusOr<core::ShardPlan> plan = core::ShardPlan::Create(
      world, model->config.strategy, model->config.sharding_factor);
  if (!plan.ok()) return plan.status();
  if (plan->sharding_factor() != factor) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model.config.sharding_factor: resolves to ", plan->sharding_factor(),
        " but the coordinator runs the job with F = ", factor));
  }
  // Files named as the initial state (load_from, resume_from,
  // TensorInit.file), checked before the ranks agree on the model: a bad
  // one fails this rank's registration, and so every rank's.
  absl::StatusOr<state::StateImport> import =
      state::StateImport::Plan(request, options_.resume_from, *model, factor);
  if (!import.ok()) return import.status();
  if (absl::Status s = options_.admission->AdmitModel("RegisterModel", *model,
                                                      world, client_->rank());
      !s.ok()) {
    return s;
  }
  // Ranks agree on digests of the initial values, never on the values.
  absl::StatusOr<v1::ModelAgreement> agreement = ModelDigest::Agreement(
      request.model(),
      [](const v1::SharedMemoryRef& ref, const std::string& field) {
        return SharedMemoryInitReader::Checksum(
            {ref.path(), ref.segment_bytes(), ref.byte_offset(),
             ref.byte_length()},
            field);
      });
  if (!agreement.ok()) return agreement.status();
  *agreement->mutable_state_source() = import->source_digest();
  if (absl::Status s = ExchangeModel(*epoch, *agreement, deadline); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(*model, factor);
  if (!layouts.ok()) return layouts.status();
  // Only this rank's shard is materialised (from shared memory: only its
  // slice is read).
  InitMaterializer materializer(*model, *layouts);
  absl::StatusOr<std::unique_ptr<StepEngine>> created = CreateEngine(
      *model, world, factor,
      [&materializer](int unit, int64_t offset, float* out, int64_t n) {
        materializer.Fill(unit, offset, out, n);
      });
  if (!created.ok()) return created.status();
  if (!materializer.status().ok()) return materializer.status();
  // The files overwrite this rank's shard of the initial values; the
  // engine is not published yet.
  absl::StatusOr<int64_t> imported_step = import->Apply(**created);
  if (!imported_step.ok()) return imported_step.status();
  std::shared_ptr<StepEngine> engine = std::move(*created);
  absl::MutexLock lock(&mu_);
  if (shard_group_ != nullptr) {
    engine->SetCommunicators(shard_group_, replica_group_);
  }
  engine_ = engine;
  model_ = *model;
  fingerprint_ = core::Fingerprint(*model, core::InitScope::kExclude);
  held_.clear();
  reduced_.clear();
  last_step_.reset();
  ops_in_step_ = 0;
  if (commit_log_ != nullptr) {
    const int64_t epoch_now = comm_epoch_;
    mu_.Unlock();
    LogCommit(*imported_step > 0
                  ? recovery::CommitRecord::Kind::kCheckpointRestored
                  : recovery::CommitRecord::Kind::kInit,
              *imported_step, epoch_now);
    mu_.Lock();
  }
  if (*imported_step > 0) {
    // The coordinator counts steps from its votes: tell it the step the
    // job resumes at, so that it expects the next one.
    const int64_t epoch_now = comm_epoch_;
    mu_.Unlock();
    if (absl::Status s = client_->SetReady(epoch_now, *imported_step);
        !s.ok()) {
      // The next heartbeat reports the step again; a vote before it is
      // refused and the step redone in the next epoch.
      std::fprintf(stderr, "shardd: telling the coordinator step %lld: %s\n",
                   static_cast<long long>(*imported_step),
                   s.ToString().c_str());
    }
    mu_.Lock();
  }
  ReportMemory(*engine_);
  v1::RegisterModelResponse response;
  response.set_committed_step(engine_->committed_step());
  response.set_epoch(comm_epoch_);
  response.set_reattached(false);
  *response.mutable_topology() = TopologyLocked();
  *response.mutable_memory() = MemoryReportLocked();
  response.set_model_fingerprint(fingerprint_);
  return response;
}

absl::StatusOr<v1::GatherResponse> NodeManager::Gather(
    const v1::GatherRequest& request, MonoTime deadline) {
  absl::MutexLock op(&op_mu_);
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  const int units = static_cast<int>((*engine)->config().units.size());
  const int unit = request.unit();
  if (absl::Status s = CheckUnitIndex(unit, units); !s.ok()) return s;
  for (int i = 0; i < request.prefetch_size(); ++i) {
    if (request.prefetch(i) < 0 || request.prefetch(i) >= units) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefetch[", i, "]: ", request.prefetch(i),
                       " is out of range (the model has ", units, " units)"));
    }
  }
  bool was_ready = false;
  {
    absl::MutexLock lock(&mu_);
    was_ready = held_.count(unit) > 0;
    const int64_t k = (*engine)->config().max_gathered_units;
    if (!was_ready && static_cast<int64_t>(held_.size()) >= k) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "max_gathered_units (", k, ") units are gathered and not released: [",
          absl::StrJoin(held_, ", "), "]; release one before gathering unit ",
          unit));
    }
    if (!ReadyLocked()) {
      CountAbortLocked(metrics::node_labels::kEpochChanged);
      return absl::AbortedError(
          absl::StrCat("the daemon is not in a ready epoch",
                       comm_failed_ ? absl::StrCat(" (", comm_error_, ")") : "",
                       "; WaitReady, then redo the step"));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    ++ops_in_step_;
    op_epoch_ = comm_epoch_;
  }
  absl::StatusOr<UnitData> data = (*engine)->Gather(unit, OpTimeout(deadline));
  if (!data.ok()) return OnCollectiveError("Gather", data.status());
  // The hints, in order: their AllGathers start now and run while the
  // trainer computes (at most K units held or in flight; the rest dropped).
  const int64_t k = (*engine)->config().max_gathered_units;
  for (int p : request.prefetch()) {
    const StepEngine::PrefetchResult result =
        (*engine)->Prefetch(p, OpTimeout(deadline), k);
    if (options_.observer != nullptr) {
      options_.observer->PrefetchHint(
          result == StepEngine::PrefetchResult::kStarted
              ? metrics::node_labels::kStarted
          : result == StepEngine::PrefetchResult::kNotNeeded
              ? metrics::node_labels::kNotNeeded
              : metrics::node_labels::kDropped);
    }
  }
  if (data->was_prefetched && options_.observer != nullptr) {
    options_.observer->PrefetchUsed();
  }
  v1::GatherResponse response;
  absl::MutexLock lock(&mu_);
  held_.insert(unit);
  *response.mutable_params() = MakeRef(*data, unit);
  if (request.pass() == v1::PASS_BACKWARD) {
    absl::StatusOr<UnitData> grad = (*engine)->GradientSlot(unit);
    if (!grad.ok()) return grad.status();
    *response.mutable_grad_buffer() = MakeRef(*grad, unit);
  }
  response.set_epoch(comm_epoch_);
  response.set_committed_step((*engine)->committed_step());
  response.set_was_ready(was_ready || data->was_ready);
  response.set_was_prefetched(data->was_prefetched);
  return response;
}

absl::StatusOr<v1::ReleaseResponse> NodeManager::Release(
    const v1::ReleaseRequest& request) {
  absl::MutexLock op(&op_mu_);
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  const int units = static_cast<int>((*engine)->config().units.size());
  const int unit = request.unit();
  if (absl::Status s = CheckUnitIndex(unit, units); !s.ok()) return s;
  v1::ReleaseResponse response;
  absl::MutexLock lock(&mu_);
  if (held_.count(unit) == 0) {
    response.set_was_gathered(false);
    return response;
  }
  if (absl::Status s = (*engine)->Release(unit, request.reshard()); !s.ok()) {
    return s;
  }
  held_.erase(unit);
  response.set_was_gathered(true);
  return response;
}

absl::StatusOr<v1::ReduceGradResponse> NodeManager::ReduceGrad(
    const v1::ReduceGradRequest& request, MonoTime deadline) {
  absl::MutexLock op(&op_mu_);
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  const int units = static_cast<int>((*engine)->config().units.size());
  const int unit = request.unit();
  if (absl::Status s = CheckUnitIndex(unit, units); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    if (reduced_.count(unit) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("unit ", unit, " was already reduced in step ",
                       (*engine)->committed_step() + 1));
    }
  }
  absl::StatusOr<UnitData> slot = (*engine)->GradientSlot(unit);
  if (!slot.ok()) return slot.status();
  const v1::DataRef& grad = request.grad();
  const int64_t elem = core::DTypeSize(slot->dtype);
  const int64_t real_bytes = (*engine)->config().units[unit].numel() * elem;
  if (grad.location_case() == v1::DataRef::LOCATION_NOT_SET) {
    return absl::InvalidArgumentError(
        "grad: required (the grad_buffer from Gather, a shared-memory range "
        "or inline bytes)");
  }
  if (grad.dtype() != ToProtoDType(slot->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad.dtype: must be ", v1::DType_Name(ToProtoDType(slot->dtype)),
        " (the reduce dtype), got ", v1::DType_Name(grad.dtype())));
  }
  if (grad.byte_length() != slot->bytes && grad.byte_length() != real_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad.byte_length: must be ", slot->bytes, " (or ", real_bytes,
        " without padding), got ", grad.byte_length()));
  }
  uint8_t* dst = slot->buffer->data() + slot->offset;
  // The gradient slot is engine memory (a GPU's, on a device backend):
  // written through the engine's math.
  EngineMath& math = (*engine)->math();
  switch (grad.location_case()) {
    case v1::DataRef::kSharedMemory: {
      const v1::SharedMemoryRef& ref = grad.shared_memory();
      if (ref.byte_length() != grad.byte_length()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grad.shared_memory.byte_length: ", ref.byte_length(),
            " differs from grad.byte_length ", grad.byte_length()));
      }
      if (ref.path() == slot->buffer->name() &&
          ref.byte_offset() == slot->offset) {
        break;  // The trainer wrote into the gradient slot: no copy.
      }
      if (ref.byte_offset() < 0 ||
          ref.byte_offset() + ref.byte_length() > ref.segment_bytes()) {
        return absl::InvalidArgumentError(
            "grad.shared_memory: range outside the segment");
      }
      absl::StatusOr<memory::SharedMemorySegment> seg =
          memory::SharedMemorySegment::Open(
              ref.path(), ref.segment_bytes(),
              memory::SharedMemorySegment::Access::kReadOnly);
      if (!seg.ok()) {
        return absl::NotFoundError(
            absl::StrCat("grad.shared_memory.path: ", seg.status().message()));
      }
      if (absl::Status s = math.Upload(
              dst, static_cast<const uint8_t*>(seg->data()) + ref.byte_offset(),
              grad.byte_length());
          !s.ok()) {
        return s;
      }
      break;
    }
    case v1::DataRef::kInlineData:
      if (static_cast<int64_t>(grad.inline_data().size()) !=
          grad.byte_length()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grad.inline_data: ", grad.inline_data().size(),
            " bytes, but grad.byte_length is ", grad.byte_length()));
      }
      if (absl::Status s =
              math.Upload(dst, grad.inline_data().data(), grad.byte_length());
          !s.ok()) {
        return s;
      }
      break;
    case v1::DataRef::kCudaIpc: {
      const v1::CudaIpcRef& ref = grad.cuda_ipc();
      if (!math.device_memory()) {
        return absl::InvalidArgumentError(
            "grad.cuda_ipc: this daemon runs on the CPU (shared memory only)");
      }
      absl::StatusOr<memory::CudaIpcName> slot_name =
          memory::ParseCudaIpcName(slot->buffer->name());
      if (!slot_name.ok() || ref.mem_handle() != slot_name->mem_handle ||
          ref.byte_offset() != slot->offset ||
          ref.byte_length() != grad.byte_length()) {
        return absl::InvalidArgumentError(
            "grad.cuda_ipc: must be the gradient slot Gather named (its "
            "handle, byte_offset and byte_length); other device memory is "
            "not accepted");
      }
      break;  // Written in place by the trainer.
    }
    default:
      return absl::InvalidArgumentError(
          "grad: required (the grad_buffer from Gather, a shared-memory range "
          "or inline bytes)");
  }
  if (grad.byte_length() < slot->bytes) {
    if (absl::Status s = math.Zero(dst + grad.byte_length(),
                                   slot->bytes - grad.byte_length());
        !s.ok()) {
      return s;
    }
  }
  if (request.accumulate_only()) {
    // No collective: the engine adds the slot into the unit's private
    // accumulation buffer (like DDP's no_sync).
    absl::Status s = (*engine)->ReduceGrad(unit, OpTimeout(deadline),
                                           /*accumulate_only=*/true);
    if (!s.ok()) return s;
    absl::MutexLock lock(&mu_);
    v1::ReduceGradResponse response;
    response.set_accumulated(++accumulated_[unit]);
    response.set_reduce_started(false);
    return response;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!ReadyLocked()) {
      CountAbortLocked(metrics::node_labels::kEpochChanged);
      return absl::AbortedError(
          "the daemon is not in a ready epoch; WaitReady, then redo the step");
    }
  }
  {
    absl::MutexLock lock(&mu_);
    ++ops_in_step_;
    op_epoch_ = comm_epoch_;
  }
  absl::Status reduced = (*engine)->ReduceGrad(unit, OpTimeout(deadline));
  if (!reduced.ok()) return OnCollectiveError("ReduceGrad", reduced);
  absl::MutexLock lock(&mu_);
  reduced_.insert(unit);
  v1::ReduceGradResponse response;
  response.set_accumulated(accumulated_[unit] + 1);
  accumulated_.erase(unit);
  response.set_reduce_started(true);
  return response;
}

absl::StatusOr<v1::StepResponse> NodeManager::Step(
    const v1::StepRequest& request, MonoTime deadline) {
  if (request.step() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: must be >= 1, got ", request.step()));
  }
  if (request.has_learning_rate() &&
      !(request.learning_rate() >= 0 &&
        std::isfinite(request.learning_rate()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning_rate: must be finite and >= 0, got ",
                     request.learning_rate()));
  }
  absl::MutexLock op(&op_mu_);
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  const EngineConfig& config = (*engine)->config();
  // This step's learning rate (schedules), else the configured one; every
  // rank's vote carries it, so ranks that disagree commit nothing.
  const double lr = request.has_learning_rate() ? request.learning_rate()
                    : config.optimizer.kind == core::OptimizerKind::kAdamW
                        ? config.optimizer.adamw.lr
                        : config.optimizer.sgd.lr;
  {
    absl::MutexLock lock(&mu_);
    const int64_t committed = (*engine)->committed_step();
    if (request.step() == committed && last_step_.has_value()) {
      v1::StepResponse again = *last_step_;
      again.set_already_committed(true);
      return again;
    }
    if (request.step() != committed + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step: ", request.step(), " is neither committed_step + 1 (",
          committed + 1, ") nor committed_step (", committed, ")"));
    }
    if (!held_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("units still gathered: [", absl::StrJoin(held_, ", "),
                       "]; release them before Step"));
    }
    std::vector<int> missing;
    for (int u = 0; u < static_cast<int>(config.units.size()); ++u) {
      if (reduced_.count(u) == 0) missing.push_back(u);
    }
    if (!missing.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("units not reduced in step ", request.step(), ": [",
                       absl::StrJoin(missing, ", "), "]"));
    }

    if (!ReadyLocked()) {
      CountAbortLocked(metrics::node_labels::kEpochChanged);
      return absl::AbortedError(
          "the daemon is not in a ready epoch; WaitReady, then redo the step");
    }
  }
  int64_t epoch = 0;
  uint64_t fingerprint = 0;
  {
    absl::MutexLock lock(&mu_);
    epoch = comm_epoch_;
    op_epoch_ = epoch;
    fingerprint = fingerprint_;
  }
  // The commit vote (invariant 1): after the gradient collectives and the
  // norm, before the optimizer. Every member gets the same answer, so
  // either all apply the step or none does.
  // Only an answer that says "do not commit" is final; a vote that got no
  // answer leaves the prepared step in doubt (ResolvePendingStep).
  // Why the vote failed, as the abort metric's reason: known here, so
  // never read back from the message.
  bool decided_no = false;
  bool vote_unanswered = false;
  const auto vote = [&](const StepResult& prepared) -> absl::Status {
    SHARDD_FAILPOINT("vote.before");
    absl::StatusOr<v1::ShouldCommitResponse> decision =
        client_->ShouldCommit(epoch, prepared.step, /*vote=*/true, "",
                              StepFingerprint(fingerprint, lr),
                              MonoNow() + options_.collective_timeout);
    if (SHARDD_FAILPOINT_FAILS("vote.answer")) {
      decision = absl::UnavailableError(
          "the answer was lost (fail point vote.answer)");
    }
    if (!decision.ok()) {
      vote_unanswered = true;
      return absl::AbortedError(absl::StrCat("commit vote on step ",
                                             prepared.step, ": ",
                                             decision.status().ToString()));
    }
    if (!decision->commit()) {
      decided_no = true;
      return absl::AbortedError(
          absl::StrCat("step ", prepared.step,
                       " rejected by the commit vote: ", decision->reason()));
    }
    SHARDD_FAILPOINT("vote.after");
    return absl::OkStatus();
  };
  const MonoTime step_started = MonoNow();
  absl::StatusOr<StepResult> result =
      (*engine)->Step(request.step(), OpTimeout(deadline), vote, lr);
  if (!result.ok()) {
    if (decided_no) {
      (*engine)->DropPending();
    } else if (const std::optional<int64_t> pending =
                   (*engine)->pending_step()) {
      std::printf(
          "shardd rank %d: step %lld is in doubt (its commit vote got no "
          "answer: %s); the next epoch's view says whether the others "
          "committed it\n",
          client_->rank(), static_cast<long long>(*pending),
          result.status().ToString().c_str());
      std::fflush(stdout);
    }
    if (IsCollectiveFailure(result.status())) {
      CountAbort(decided_no        ? metrics::node_labels::kVoteRejected
                 : vote_unanswered ? metrics::node_labels::kEpochChanged
                                   : metrics::node_labels::kPeerFailure);
    }
    return OnCollectiveError("Step", result.status());
  }
  if (options_.observer != nullptr) {
    options_.observer->StepCommitted(MonoNow() - step_started, result->step);
    ReportMemory(**engine);
  }
  LogCommit(recovery::CommitRecord::Kind::kCommit, result->step, epoch);
  {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    event.mutable_step_committed()->set_step(result->step);
    event.mutable_step_committed()->set_grad_norm(result->grad_norm);
    events_.Append(std::move(event));
  }
  if (options_.checkpoint_interval_steps > 0 &&
      result->step % options_.checkpoint_interval_steps == 0) {
    WriteCheckpoint(result->step, epoch);
  }
  absl::MutexLock lock(&mu_);
  reduced_.clear();
  ops_in_step_ = 0;
  abort_counted_ = false;
  v1::StepResponse response;
  response.set_committed_step(result->step);
  response.set_epoch(comm_epoch_);
  response.set_grad_norm(result->grad_norm);
  response.set_clip_scale(result->clip_scale);
  response.set_learning_rate(lr);
  last_step_ = response;
  return response;
}

absl::StatusOr<v1::WaitReadyResponse> NodeManager::WaitReady(
    const v1::WaitReadyRequest& request, MonoTime deadline) {
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
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
  absl::MutexLock op(&op_mu_);
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = EngineOrError();
  if (!engine.ok()) return engine.status();
  core::ModelConfig model;
  int64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!held_.empty() || !reduced_.empty()) {
      return absl::FailedPreconditionError(
          "a step is in progress (units gathered or reduced); export between "
          "steps");
    }
    model = *model_;
    if (request.layout() == v1::EXPORT_LAYOUT_FULL) {
      if (!ReadyLocked()) {
        return absl::AbortedError("the daemon is not in a ready epoch");
      }
      op_epoch_ = comm_epoch_;
    }
    epoch = comm_epoch_;
  }
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
  StateExport state_export(**engine, model, *options_.admission,
                           std::move(options));
  // What would end this rank's export before its gathers (the step, its
  // memory) is decided before it joins: after "go" its peers would wait in
  // the gathers.
  absl::StatusOr<ExportAdmission> admitted = state_export.Admit(request);
  if (!admitted.ok()) return admitted.status();
  // Every rank agrees before the first gather that all take part: a rank
  // that never calls ExportState fails the export on every rank cleanly,
  // instead of a gather timeout that reads as a failed peer.
  const EngineConfig& config = (*engine)->config();
  if (request.layout() == v1::EXPORT_LAYOUT_FULL &&
      config.plan.sharding_factor() > 1) {
    std::unique_ptr<comm::CoordinatorStore> store = StoreOfEpoch(epoch);
    ExportRendezvous rendezvous(
        *store, {.rank = config.rank,
                 .world_size = static_cast<int>(config.plan.world_size()),
                 .window = options_.collective_timeout,
                 .attempt_id = nullptr});
    if (absl::Status s = rendezvous.Agree((*engine)->committed_step());
        !s.ok()) {
      return s;
    }
  }
  return state_export.Run(request, deadline, *admitted);
}

absl::Status NodeManager::ServeShard(
    const v1::FetchShardRequest& request, MonoTime deadline,
    const std::function<bool(const v1::FetchShardResponse&)>& send) {
  if (request.max_chunk_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_chunk_bytes: must be >= 0, got ", request.max_chunk_bytes()));
  }
  if (request.shard_index() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index: must be >= 0, got ", request.shard_index()));
  }
  if (stop_.load()) return absl::UnavailableError("shutting down");
  // A consistent snapshot: no trainer operation (a Step) runs while the
  // shard streams. During recovery the epoch is not ready, so the wait is
  // short; it is bounded by the deadline all the same.
  while (!op_mu_.TryLock()) {
    if (MonoNow() >= deadline) {
      return absl::DeadlineExceededError(
          "FetchShard: a trainer operation held the daemon until the "
          "deadline");
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  struct Unlock {
    absl::Mutex* mu;
    ~Unlock() { mu->Unlock(); }
  } unlock{&op_mu_};
  std::shared_ptr<StepEngine> engine;
  v1::ShardHeader header;
  std::vector<recovery::SectionSource> sources;
  {
    absl::MutexLock lock(&mu_);
    if (engine_ == nullptr) {
      return absl::FailedPreconditionError(
          "this daemon holds no model: nothing to send");
    }
    engine = engine_;
    const int f = engine->config().plan.sharding_factor();
    const int rank = engine->config().rank;
    if (rank % f != request.shard_index()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard_index: this daemon (rank ", rank, ") holds shard ", rank % f,
          ", not ", request.shard_index(), ": the plan is stale"));
    }
    DescribeShardLocked(*engine, &header, &sources);
  }
  const int64_t epoch = client_->view().epoch;
  if (request.epoch() != epoch) {
    return absl::AbortedError(absl::StrCat(
        "epoch: ", request.epoch(), " is not this daemon's epoch ", epoch));
  }
  const int64_t step = engine->committed_step();
  if (request.step() != step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: the plan asks for step ", request.step(),
        " but this daemon's committed step is ", step, ": the plan is stale"));
  }
  header.set_epoch(epoch);
  header.set_step(step);
  header.set_optimizer_step(step);

  // The payload over this epoch's replica group, when asked and possible:
  // the requester holds our shard index, so it is a member of our replica
  // group (rank requester / F there).
  std::shared_ptr<comm::Collective> replica;
  int peer = -1;
  if (request.payload_over_replica_group()) {
    replica =
        ReplicaGroupOf(epoch, std::min(deadline, MonoNow() + absl::Seconds(5)));
    const int f = engine->config().plan.sharding_factor();
    peer = request.requester_rank() / f;
    if (replica != nullptr &&
        (request.requester_rank() < 0 ||
         request.requester_rank() % f != request.shard_index() ||
         peer == replica->rank() || peer >= replica->size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "requester_rank: ", request.requester_rank(),
          " is not another member of shard ", request.shard_index(),
          "'s replica group (F = ", f, ", ", replica->size(), " replicas)"));
    }
  }
  // The pieces' CRCs, if computed ahead of this copy (after the
  // replacement's Probe) from this very state and for this piece size.
  std::vector<uint32_t> piece_crcs;
  if (replica != nullptr && request.resume_from_byte() == 0 &&
      request.max_chunk_bytes() == recovery::kMaxPieceBytesCap) {
    piece_crcs =
        PieceCrcsFor(engine, std::min(deadline, MonoNow() + absl::Seconds(5)));
  }
  const bool precomputed = !piece_crcs.empty();
  absl::StatusOr<recovery::ShardStreamWriter> writer =
      recovery::ShardStreamWriter::Create(
          header, sources, request.max_chunk_bytes(),
          request.resume_from_byte(),
          /*payload_out_of_band=*/replica != nullptr, std::move(piece_crcs),
          *shard_memory_);
  if (!writer.ok() && precomputed) {
    // Not the same pieces after all: compute them while sending.
    writer = recovery::ShardStreamWriter::Create(
        header, std::move(sources), request.max_chunk_bytes(),
        request.resume_from_byte(),
        /*payload_out_of_band=*/replica != nullptr, {}, *shard_memory_);
  }
  if (!writer.ok()) return writer.status();
  std::printf("shardd rank %d: sending shard %d at step %lld to rank %d %s\n",
              client_->rank(), request.shard_index(),
              static_cast<long long>(step), request.requester_rank(),
              replica == nullptr ? "in the stream"
              : precomputed ? "over the replica group (piece CRCs precomputed)"
                            : "over the replica group");
  std::fflush(stdout);
  // Every piece is queued at once, straight from the shard: the
  // communicator sends them one after another while this thread computes
  // the chunks' CRCs. Any failure below aborts the replica group (the
  // epoch's communicators are never mended: its Sends would otherwise hold
  // it until their deadline) and waits for the Sends before returning.
  std::vector<std::shared_ptr<comm::Work>> sends;
  if (replica != nullptr) {
    comm::OpOptions op;
    op.timeout = std::max(deadline - MonoNow(), absl::Milliseconds(1));
    for (const recovery::PayloadPiece& piece : writer->PendingPieces()) {
      sends.push_back(
          replica->Send(piece.data, piece.length, peer, kShardTransferTag, op));
    }
  }
  struct AbortUnfinished {
    comm::Collective* replica;
    const std::vector<std::shared_ptr<comm::Work>>* sends;
    bool ok = false;
    ~AbortUnfinished() {
      if (ok || sends->empty()) return;
      replica->Abort("a shard copy over the replica group failed");
      WaitAll(*sends);
    }
  } abort_unfinished{replica.get(), &sends};
  // Pieces whose chunk was written, and whose Send was waited for.
  size_t pieces_described = 0;
  size_t pieces_sent = 0;
  auto wait_sends = [&](size_t n) -> absl::Status {
    for (; pieces_sent < n; ++pieces_sent) {
      if (absl::Status s = sends[pieces_sent]->Wait(); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  int64_t total = 0;
  for (const StepEngine::StateSection& section : engine->StateSections()) {
    total += section.bytes;
  }
  bool fired = false;
  v1::FetchShardResponse message;
  struct Report {
    metrics::NodeObserver* observer;
    const recovery::ShardStreamWriter* writer;
    bool ok = false;
    ~Report() {
      if (observer == nullptr) return;
      observer->RecoveryBytes(metrics::node_labels::kSent,
                              writer->bytes_sent());
      observer->RecoveryTransfer(metrics::node_labels::kSource, ok);
    }
  } report{options_.observer, &*writer};
  while (writer->Next(&message)) {
    if (!send(message)) {
      return absl::UnavailableError(
          "FetchShard: the receiver closed the stream");
    }
    // Chunks (each piece's CRC) and the trailer go out as soon as they are
    // computed, ahead of the bytes: the receiver checks a piece only once
    // its Recv completed, so nothing waits on them at the end.
    if (message.has_chunk() && !sends.empty()) ++pieces_described;
    if (!fired && writer->bytes_sent() * 2 >= total) {
      fired = true;
      // Half the bytes out, not only described.
      if (absl::Status sent = wait_sends(pieces_described); !sent.ok()) {
        return sent;
      }
      SHARDD_FAILPOINT("transfer.source.mid");
    }
    if (MonoNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("FetchShard: deadline reached after ",
                       writer->bytes_sent(), " of ", total, " bytes"));
    }
    if (client_->view().epoch != epoch) {
      return absl::AbortedError(absl::StrCat(
          "FetchShard: the epoch changed from ", epoch, " mid-stream"));
    }
  }
  // Reading the shard's memory (a GPU's, through the engine's math) failed.
  if (!writer->status().ok()) return writer->status();
  if (pieces_described != sends.size()) {
    return absl::InternalError(
        absl::StrCat("FetchShard: ", sends.size() - pieces_described, " of ",
                     sends.size(), " pieces were queued but never described"));
  }
  if (absl::Status sent = wait_sends(sends.size()); !sent.ok()) return sent;
  report.ok = true;
  abort_unfinished.ok = true;
  return absl::OkStatus();
}

void NodeManager::PrecomputePieceCrcs() {
  std::optional<PieceCrcs> computed;
  std::shared_ptr<StepEngine> engine;
  v1::ShardHeader header;
  std::vector<recovery::SectionSource> sources;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
    if (engine != nullptr) DescribeShardLocked(*engine, &header, &sources);
  }
  if (engine != nullptr) {
    // Read between two equal versions: no step or install changed the bytes
    // meanwhile (during a recovery no step runs, so this is the usual case).
    const uint64_t version = engine->state_version();
    absl::StatusOr<recovery::ShardStreamWriter> writer =
        recovery::ShardStreamWriter::Create(
            header, std::move(sources), recovery::kMaxPieceBytesCap, 0,
            /*payload_out_of_band=*/true, {}, *shard_memory_);
    if (writer.ok()) {
      PieceCrcs crcs{engine, version, {}};
      bool read_all = true;
      for (const recovery::PayloadPiece& piece : writer->PendingPieces()) {
        absl::StatusOr<uint32_t> crc = recovery::ShardCrc32cExtend(
            *shard_memory_, 0, piece.data, piece.length);
        if (!crc.ok()) {
          read_all = false;  // ServeShard computes them while sending.
          break;
        }
        crcs.crcs.push_back(*crc);
      }
      if (read_all && engine->state_version() == version) {
        computed = std::move(crcs);
      }
    }
  }
  absl::MutexLock lock(&crc_mu_);
  if (computed.has_value()) piece_crcs_ = std::move(computed);
  crc_running_ = false;
}

std::vector<uint32_t> NodeManager::PieceCrcsFor(
    const std::shared_ptr<StepEngine>& engine, MonoTime deadline) {
  absl::MutexLock lock(&crc_mu_);
  const auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(crc_mu_) {
    return !crc_running_;
  };
  if (!AwaitUntil(&crc_mu_, absl::Condition(&settled), deadline)) {
    return {};
  }
  if (!piece_crcs_.has_value() || piece_crcs_->engine.lock() != engine ||
      piece_crcs_->state_version != engine->state_version()) {
    return {};
  }
  return piece_crcs_->crcs;
}

std::shared_ptr<comm::Collective> NodeManager::ReplicaGroupOf(
    int64_t epoch, MonoTime deadline) {
  absl::MutexLock lock(&mu_);
  // Our epoch thread may still be building it (the requester's is built, so
  // ours is connected or moments away). Await re-checks at every unlock.
  const auto built = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return comm_epoch_ >= epoch;
  };
  AwaitUntil(&mu_, absl::Condition(&built), deadline);
  if (comm_epoch_ != epoch || comm_failed_ || replica_group_ == nullptr ||
      !replica_group_->AsyncError().ok()) {
    return nullptr;
  }
  return replica_group_;
}

void NodeManager::DescribeShardLocked(
    const StepEngine& engine, v1::ShardHeader* header,
    std::vector<recovery::SectionSource>* sources) const {
  const EngineConfig& config = engine.config();
  const int f = config.plan.sharding_factor();
  header->set_source_rank(config.rank);
  header->set_shard_index(config.rank % f);
  *header->mutable_model() = ProtoConvert::ModelToProto(*model_);
  header->set_model_fingerprint(fingerprint_);
  header->set_last_learning_rate(engine.learning_rate());
  // StateSections hands out pointers into buffers that live as long as the
  // engine; reading them needs no lock of the engine's.
  for (const StepEngine::StateSection& section :
       const_cast<StepEngine&>(engine).StateSections()) {
    recovery::SectionSource source;
    source.section.set_unit(section.unit);
    source.section.set_kind(ToSectionKind(section.kind));
    source.section.set_dtype(v1::DTYPE_FP32);
    source.section.set_numel(section.numel);
    source.section.set_byte_length(section.bytes);
    source.data = section.data;
    sources->push_back(std::move(source));
  }
}

void NodeManager::WriteCheckpoint(int64_t step, int64_t epoch) {
  if (options_.checkpoint_dir.empty()) return;
  v1::ShardHeader header;
  std::vector<recovery::SectionSource> sources;
  int rank = 0;
  {
    absl::MutexLock lock(&mu_);
    if (engine_ == nullptr) return;
    DescribeShardLocked(*engine_, &header, &sources);
    rank = engine_->config().rank;
  }
  header.set_epoch(epoch);
  header.set_step(step);
  header.set_optimizer_step(step);
  absl::StatusOr<std::string> path = recovery::WriteShardCheckpoint(
      options_.checkpoint_dir, rank, header, sources,
      options_.checkpoint_keep_last, *shard_memory_);
  if (!path.ok()) {
    // Training goes on; the next interval tries again, and a fallback
    // meanwhile uses an older checkpoint.
    std::fprintf(stderr, "shardd: checkpoint of step %lld: %s\n",
                 static_cast<long long>(step),
                 path.status().ToString().c_str());
    return;
  }
  catalog_->NoteWritten(rank, step);
  // The coordinator plans rollbacks from the members' inventories: tell it
  // now, not at the next heartbeat, so that a failure right after this step
  // rolls back to it.
  (void)client_->SendHeartbeat();
  if (options_.observer != nullptr) {
    options_.observer->CheckpointWritten(absl::Now());
  }
}

absl::StatusOr<int64_t> NodeManager::RestoreCheckpoint(int64_t step,
                                                       int64_t epoch) {
  if (options_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError(
        "no --checkpoint_dir: this daemon keeps no checkpoints");
  }
  const int rank = client_->rank();
  std::string path;
  if (step < 0) {
    absl::StatusOr<std::string> latest =
        recovery::LatestShardCheckpoint(options_.checkpoint_dir, rank);
    if (!latest.ok()) return latest.status();
    path = *latest;
  } else {
    path = recovery::ShardCheckpointPath(options_.checkpoint_dir, rank, step);
  }
  absl::StatusOr<v1::ShardHeader> peek =
      recovery::ReadShardCheckpointHeader(path);
  if (!peek.ok()) return peek.status();
  std::shared_ptr<StepEngine> engine;
  std::optional<core::ModelConfig> model;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
    if (engine != nullptr) model = model_;
  }
  const bool fresh = engine == nullptr;
  if (fresh) {
    absl::StatusOr<core::ModelConfig> m =
        ProtoConvert::ModelFromProto(peek->model());
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat(path, ": ", m.status().message()));
    }
    int world = 0, factor = 0;
    {
      absl::MutexLock lock(&mu_);
      world = world_size_;
      factor = sharding_factor_;
    }
    absl::StatusOr<std::unique_ptr<StepEngine>> created = CreateEngine(
        *m, world, factor, [](int, int64_t, float* out, int64_t n) {
          std::fill(out, out + n, 0.0f);
        });
    if (!created.ok()) return created.status();
    engine = std::move(*created);
    model = *std::move(m);
  }
  const uint64_t fingerprint =
      core::Fingerprint(*model, core::InitScope::kExclude);
  if (peek->model_fingerprint() != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": holds a shard of another model (fingerprint ",
        peek->model_fingerprint(), ", this model ", fingerprint, ")"));
  }
  // Trainer operations wait while the state is overwritten.
  absl::MutexLock op(&op_mu_);
  const std::vector<StepEngine::StateSection> mine = engine->StateSections();
  v1::ShardHeader header;
  absl::Status read = recovery::ReadShardCheckpoint(
      path,
      [&](const v1::ShardHeader& h, int index) -> absl::StatusOr<uint8_t*> {
        if (static_cast<int>(mine.size()) != h.sections_size()) {
          return absl::FailedPreconditionError(
              absl::StrCat(path, ": ", h.sections_size(),
                           " sections, this rank's shard has ", mine.size()));
        }
        const v1::ShardSection& theirs = h.sections(index);
        if (theirs.unit() != mine[index].unit ||
            theirs.kind() != ToSectionKind(mine[index].kind) ||
            theirs.byte_length() != mine[index].bytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              path, ": section ", index, " does not match this rank's shard"));
        }
        return mine[index].data;
      },
      &header, /*payload_crc_out=*/nullptr, *shard_memory_);
  if (!read.ok()) {
    // A live engine's state is garbage now: no collective may use it
    // until a restore succeeds (a fresh engine is simply dropped).
    if (!fresh) {
      absl::MutexLock lock(&mu_);
      comm_failed_ = true;
      comm_error_ = read.ToString();
    }
    return read;
  }
  if (absl::Status s = engine->InstallState(header.step()); !s.ok()) {
    if (!fresh) {
      absl::MutexLock lock(&mu_);
      comm_failed_ = true;
      comm_error_ = s.ToString();
    }
    return s;
  }
  {
    absl::MutexLock lock(&mu_);
    if (fresh) {
      if (shard_group_ != nullptr) {
        engine->SetCommunicators(shard_group_, replica_group_);
      }
      engine_ = engine;
      model_ = *model;
      fingerprint_ = fingerprint;
    }
    held_.clear();
    reduced_.clear();
    last_step_.reset();
    ops_in_step_ = 0;
  }
  std::printf("shardd rank %d restored its checkpoint of step %lld from %s\n",
              rank, static_cast<long long>(header.step()), path.c_str());
  std::fflush(stdout);
  if (options_.observer != nullptr) options_.observer->CheckpointRestored();
  ReportMemory(*engine);
  LogCommit(recovery::CommitRecord::Kind::kCheckpointRestored, header.step(),
            epoch);
  return header.step();
}

void NodeManager::CountAbort(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  CountAbortLocked(reason);
}

void NodeManager::CountAbortLocked(absl::string_view reason) {
  // Once per step attempt, whichever call saw the abort first.
  if (abort_counted_ || options_.observer == nullptr) return;
  abort_counted_ = true;
  options_.observer->StepAborted(reason);
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
  {
    absl::MutexLock lock(&mu_);
    recovering_ = true;
  }
  const MonoTime started = MonoNow();
  const MonoTime deadline = started + options_.recovery_timeout;
  absl::Status last = absl::UnavailableError("no source in the plan");
  int last_source = -1;
  for (int source : plan.source_ranks()) {
    last_source = source;
    last = FetchFrom(epoch, plan, source, deadline);
    if (last.ok() || absl::IsNotFound(last)) break;
    std::fprintf(stderr,
                 "shardd: shard copy from rank %d failed: %s; trying the "
                 "next source\n",
                 source, last.ToString().c_str());
    if (client_->view().epoch != epoch || MonoNow() >= deadline) break;
  }
  absl::MutexLock lock(&mu_);
  recovering_ = false;
  if (absl::IsNotFound(last)) {
    // The replicas hold no model yet: there is nothing to copy.
    recovery_done_ = true;
    return absl::OkStatus();
  }
  if (!last.ok()) {
    if (client_->view().epoch == epoch && last_source >= 0) {
      mu_.Unlock();
      (void)client_->ReportFailure(
          last_source, v1::FAILURE_KIND_TRANSFER_FAILED, last.message(), epoch);
      mu_.Lock();
    }
    return last;
  }
  recovery_done_ = true;
  recovery_error_.clear();
  return absl::OkStatus();
}

bool NodeManager::DropPendingAt(int64_t step, int64_t epoch) {
  std::shared_ptr<StepEngine> engine;
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
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
    engine = engine_;
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
  LogCommit(recovery::CommitRecord::Kind::kCommit, applied->step, view.epoch);
  {
    v1::TrainerEvent event;
    event.set_epoch(view.epoch);
    event.mutable_step_committed()->set_step(applied->step);
    event.mutable_step_committed()->set_grad_norm(applied->grad_norm);
    events_.Append(std::move(event));
  }
  if (options_.checkpoint_interval_steps > 0 &&
      applied->step % options_.checkpoint_interval_steps == 0) {
    WriteCheckpoint(applied->step, view.epoch);
  }
  absl::MutexLock lock(&mu_);
  reduced_.clear();
  ops_in_step_ = 0;
  v1::StepResponse response;
  response.set_committed_step(applied->step);
  response.set_epoch(view.epoch);
  response.set_grad_norm(applied->grad_norm);
  response.set_clip_scale(applied->clip_scale);
  response.set_learning_rate(engine->learning_rate());
  last_step_ = response;
}

void NodeManager::PrepareEngine(const v1::ShardTransfer& plan, int world,
                                int factor) {
  if (!options_.probe_peer) return;
  const MonoTime started = MonoNow();
  const int source = plan.source_ranks(0);
  std::string address;
  for (const v1::MemberInfo& m : client_->view().members) {
    if (m.rank() == source) address = m.peer_address();
  }
  if (address.empty()) return;
  absl::StatusOr<v1::ProbeResponse> probe = options_.probe_peer(
      address, MonoNow() + absl::Seconds(2), /*include_model=*/true);
  if (!probe.ok() || !probe->registered() || !probe->has_model()) return;
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(probe->model());
  if (!model.ok()) return;
  absl::StatusOr<std::unique_ptr<StepEngine>> created = CreateEngine(
      *model, world, factor, [](int, int64_t, float* out, int64_t n) {
        std::fill(out, out + n, 0.0f);
      });
  if (!created.ok()) return;
  const absl::Duration build_time = MonoNow() - started;
  std::printf(
      "shardd rank %d: engine prepared in %.3f s while the epoch's "
      "communicators formed\n",
      client_->rank(), absl::ToDoubleSeconds(build_time));
  std::fflush(stdout);
  absl::MutexLock lock(&mu_);
  prepared_ = PreparedEngine{.engine = std::move(*created),
                             .model = *std::move(model),
                             .fingerprint = probe->model_fingerprint(),
                             .source = source,
                             .world_size = world,
                             .sharding_factor = factor,
                             .build_time = build_time};
}

absl::Status NodeManager::FetchFrom(int64_t epoch,
                                    const v1::ShardTransfer& plan, int source,
                                    MonoTime deadline) {
  if (!options_.fetch_shard || !options_.probe_peer) {
    return absl::FailedPreconditionError(
        "this daemon was started without a Peer client");
  }
  std::string address;
  for (const v1::MemberInfo& m : client_->view().members) {
    if (m.rank() == source) address = m.peer_address();
  }
  if (address.empty()) {
    return absl::UnavailableError(
        absl::StrCat("source rank ", source, " is not a live member"));
  }
  const MonoTime started = MonoNow();
  int world = 0, factor = 0;
  // An engine prepared from this source's model (for this W and F), taken
  // here so that a failed attempt does not leave it half-written for the
  // next: that one builds its own.
  std::optional<PreparedEngine> prepared;
  {
    absl::MutexLock lock(&mu_);
    world = world_size_;
    factor = sharding_factor_;
    if (prepared_.has_value() && prepared_->world_size == world &&
        prepared_->sharding_factor == factor) {
      prepared = std::move(prepared_);
    }
    prepared_.reset();
  }
  if (!prepared.has_value() || prepared->source != source) {
    // Its Probe said it holds the model; otherwise ask now.
    absl::StatusOr<v1::ProbeResponse> probe = options_.probe_peer(
        address, std::min(deadline, MonoNow() + absl::Seconds(2)),
        /*include_model=*/false);
    if (!probe.ok()) return probe.status();
    if (!probe->registered()) {
      return absl::NotFoundError(absl::StrCat(
          "rank ", source, " holds no model yet: nothing to recover"));
    }
  }
  v1::FetchShardRequest request;
  request.set_epoch(epoch);
  request.set_requester_rank(client_->rank());
  request.set_shard_index(plan.shard_index());
  request.set_step(plan.step());
  // The bytes over our replica group when it is healthy (the source is in
  // it: it holds our shard index); else inside the stream.
  std::shared_ptr<comm::Collective> replica;
  if (options_.recovery_over_replica_group && factor > 0) {
    replica = ReplicaGroupOf(epoch, MonoNow());
  }
  if (replica != nullptr) {
    request.set_payload_over_replica_group(true);
    request.set_max_chunk_bytes(recovery::kMaxPieceBytesCap);
  }
  std::vector<std::shared_ptr<comm::Work>> recvs;
  size_t pieces_done = 0;
  std::shared_ptr<StepEngine> engine;
  std::vector<StepEngine::StateSection> mine;
  std::optional<core::ModelConfig> model;
  recovery::ShardStreamAssembler assembler(
      [&](const v1::ShardHeader& header,
          int index) -> absl::StatusOr<uint8_t*> {
        if (engine == nullptr) {
          const MonoTime t_create = MonoNow();
          const bool was_prepared =
              prepared.has_value() &&
              prepared->fingerprint == header.model_fingerprint();
          absl::Duration build_time;
          if (was_prepared) {
            build_time = prepared->build_time;
            engine = std::move(prepared->engine);
            model = std::move(prepared->model);
          } else {
            absl::StatusOr<core::ModelConfig> m =
                ProtoConvert::ModelFromProto(header.model());
            if (!m.ok()) return m.status();
            absl::StatusOr<std::unique_ptr<StepEngine>> created = CreateEngine(
                *m, world, factor, [](int, int64_t, float* out, int64_t n) {
                  std::fill(out, out + n, 0.0f);
                });
            if (!created.ok()) return created.status();
            engine = std::move(*created);
            model = *std::move(m);
          }
          prepared.reset();
          mine = engine->StateSections();
          if (!was_prepared) build_time = MonoNow() - t_create;
          std::printf("shardd rank %d: engine ready for the shard copy (%s)\n",
                      client_->rank(),
                      was_prepared
                          ? "prepared during the rendezvous"
                          : absl::StrFormat("created in %.3f s",
                                            absl::ToDoubleSeconds(build_time))
                                .c_str());
          std::fflush(stdout);
          // bench/recovery splits the copy at this event: engine vs. stream.
          v1::TrainerEvent event;
          event.set_epoch(epoch);
          v1::CopyEngineReady* ready = event.mutable_copy_engine_ready();
          ready->set_source_rank(source);
          ready->set_prepared_during_rendezvous(was_prepared);
          ready->set_build_seconds(absl::ToDoubleSeconds(build_time));
          events_.Append(std::move(event));
          if (static_cast<int>(mine.size()) != header.sections_size()) {
            return absl::FailedPreconditionError(
                absl::StrCat("the source sends ", header.sections_size(),
                             " sections, this rank's shard has ", mine.size()));
          }
        }
        const v1::ShardSection& theirs = header.sections(index);
        const StepEngine::StateSection& ours = mine[index];
        if (theirs.unit() != ours.unit ||
            theirs.kind() != ToSectionKind(ours.kind) ||
            theirs.byte_length() != ours.bytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              "section ", index, " (unit ", theirs.unit(), ", ",
              v1::ShardSectionKind_Name(theirs.kind()), ", ",
              theirs.byte_length(), " bytes) does not match this rank's (unit ",
              ours.unit, ", ", ours.bytes, " bytes)"));
        }
        return ours.data;
      },
      /*resume_from_byte=*/0, /*crc_so_far=*/0, *shard_memory_);
  int64_t total = -1;
  bool fired = false;
  {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    event.mutable_recovery()->set_phase(v1::RECOVERY_PHASE_TRANSFERRING_STATE);
    events_.Append(std::move(event));
  }
  absl::Status streamed = options_.fetch_shard(
      address, request, deadline,
      [&](const v1::FetchShardResponse& message) -> absl::Status {
        if (message.has_chunk() && !recvs.empty()) {
          // An out-of-band piece: its chunk is checked over the bytes
          // once they are in place.
          if (pieces_done == recvs.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("FetchShard: more chunks than the header's ",
                             recvs.size(), " pieces"));
          }
          if (absl::Status got = recvs[pieces_done++]->Wait(); !got.ok()) {
            return got;
          }
        }
        if (absl::Status s = assembler.Add(message); !s.ok()) return s;
        if (message.has_header()) {
          total = message.header().total_bytes();
          if (message.header().payload_out_of_band()) {
            if (replica == nullptr) {
              return absl::FailedPreconditionError(
                  "FetchShard: the source sends the payload over the replica "
                  "group, which this request did not ask for");
            }
            comm::OpOptions op;
            op.timeout = std::max(deadline - MonoNow(), absl::Milliseconds(1));
            for (const recovery::PayloadPiece& piece :
                 assembler.PendingPieces()) {
              recvs.push_back(replica->Recv(piece.data, piece.length,
                                            source / factor, kShardTransferTag,
                                            op));
            }
          }
        }
        if (!fired && total >= 0 && assembler.verified_bytes() * 2 >= total) {
          fired = true;
          SHARDD_FAILPOINT("transfer.target.mid");
        }
        return absl::OkStatus();
      });
  if (streamed.ok()) streamed = assembler.Finish();
  if (replica != nullptr && !streamed.ok()) {
    // A copy over the replica group failed: end our receives before the
    // engine they write into can go away, and close our pairs so that the
    // source's Sends (queued before its header, perhaps never matched) end
    // now, not at their deadline with its replica group held. The epoch's
    // communicator is never mended; the next source streams inline.
    replica->Abort(absl::StrCat("the shard copy from rank ", source,
                                " failed: ", streamed.ToString()));
    WaitAll(recvs);
  }
  if (options_.observer != nullptr) {
    options_.observer->RecoveryBytes(metrics::node_labels::kReceived,
                                     assembler.verified_bytes());
  }
  if (options_.observer != nullptr) {
    options_.observer->RecoveryTransfer(metrics::node_labels::kTarget,
                                        streamed.ok());
  }
  if (!streamed.ok()) return streamed;
  const v1::ShardHeader& header = assembler.header();
  if (absl::Status s = engine->InstallState(header.step()); !s.ok()) return s;
  const uint64_t fingerprint =
      core::Fingerprint(*model, core::InitScope::kExclude);
  if (fingerprint != header.model_fingerprint()) {
    return absl::DataLossError(
        absl::StrCat("the model in the stream has fingerprint ", fingerprint,
                     " but the source announced ", header.model_fingerprint()));
  }
  {
    absl::MutexLock lock(&mu_);
    if (shard_group_ != nullptr) {
      engine->SetCommunicators(shard_group_, replica_group_);
    }
    engine_ = engine;
    model_ = *model;
    fingerprint_ = fingerprint;
    held_.clear();
    reduced_.clear();
    last_step_.reset();
    ops_in_step_ = 0;
  }
  const double seconds = absl::ToDoubleSeconds(MonoNow() - started);
  std::printf(
      "shardd rank %d recovered shard %d at step %lld from rank %d: %lld "
      "bytes in %.3f s (%.1f MB/s, %s)\n",
      client_->rank(), plan.shard_index(),
      static_cast<long long>(header.step()), source,
      static_cast<long long>(header.total_bytes()), seconds,
      seconds > 0 ? header.total_bytes() / seconds / 1e6 : 0.0,
      header.payload_out_of_band() ? "over the replica group"
                                   : "in the stream");
  std::fflush(stdout);
  ReportMemory(*engine);
  {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    v1::RecoveryProgress* progress = event.mutable_recovery();
    progress->set_phase(v1::RECOVERY_PHASE_COMPLETE);
    progress->set_bytes_done(header.total_bytes());
    progress->set_bytes_total(header.total_bytes());
    events_.Append(std::move(event));
  }
  LogCommit(recovery::CommitRecord::Kind::kRecovered, header.step(), epoch);
  return absl::OkStatus();
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
  if (reachability_ != nullptr) {
    for (const PeerProbeState& p : reachability_->Peers()) {
      v1::PeerReachabilityStatus* out = status.add_peers();
      out->set_rank(p.rank);
      out->set_peer_address(p.address);
      out->set_incarnation(p.incarnation);
      out->set_consecutive_failures(p.consecutive_failures);
      out->set_probes_answered(p.probes_answered);
      out->set_last_error(p.last_error);
      out->set_reported_unreachable(p.reported);
    }
  }
  if (options_.shm_usage) {
    const auto [leftover, swept] = options_.shm_usage();
    status.set_shm_leftover_bytes(leftover);
    status.set_shm_swept_bytes(swept);
  }
  absl::MutexLock lock(&mu_);
  status.set_rank(client_->rank());
  status.set_epoch(comm_epoch_);
  const bool ready = ReadyLocked();
  status.set_ready(ready);
  status.set_member_state(ready         ? v1::MEMBER_STATE_READY
                          : recovering_ ? v1::MEMBER_STATE_RECOVERING
                                        : v1::MEMBER_STATE_JOINING);
  *status.mutable_topology() = TopologyLocked();
  status.set_device(device_memory_ ? v1::DEVICE_KIND_CUDA
                                   : v1::DEVICE_KIND_CPU);
  status.set_recovery_phase(recovering_ ? v1::RECOVERY_PHASE_TRANSFERRING_STATE
                            : (!recovery_error_.empty() && engine_ == nullptr)
                                ? v1::RECOVERY_PHASE_UNRECOVERABLE
                                : v1::RECOVERY_PHASE_COMPLETE);
  status.set_version("shardd v1 (CPU data plane)");
  status.set_job_state(absl::IsDataLoss(view.error) ? v1::JOB_STATE_FAILED
                                                    : v1::JOB_STATE_RUNNING);
  if (absl::IsDataLoss(view.error)) {
    status.set_job_failure(std::string(view.error.message()));
  }
  status.set_registered(engine_ != nullptr);
  if (engine_ != nullptr) {
    status.set_committed_step(engine_->committed_step());
    status.set_model_fingerprint(fingerprint_);
    *status.mutable_memory() = MemoryReportLocked();
  }
  for (int u : held_) status.add_gathered_units(u);
  const std::pair<v1::ProcessGroup, const comm::Collective*> groups[] = {
      {v1::PROCESS_GROUP_SHARD, shard_group_.get()},
      {v1::PROCESS_GROUP_REPLICA, replica_group_.get()}};
  const std::pair<comm::OpKind, v1::CollectiveKind> kinds[] = {
      {comm::OpKind::kAllGather, v1::COLLECTIVE_KIND_ALL_GATHER},
      {comm::OpKind::kReduceScatter, v1::COLLECTIVE_KIND_REDUCE_SCATTER},
      {comm::OpKind::kAllReduce, v1::COLLECTIVE_KIND_ALL_REDUCE}};
  for (const auto& [group, collective] : groups) {
    if (collective == nullptr) continue;
    const comm::CollectiveStats stats = collective->Stats();
    for (const auto& [op, kind] : kinds) {
      const comm::OpCounters& c = stats.of(op);
      v1::CollectiveStats* out = status.add_collectives();
      out->set_kind(kind);
      out->set_group(group);
      out->set_calls(c.calls);
      out->set_failures(c.failures);
      out->set_buffer_bytes(c.bytes);
      // Ring algorithms on n ranks move (n-1)/n of the buffer each way for
      // all-gather and reduce-scatter, twice that for all-reduce (what the
      // Gloo backend runs); so FULL_SHARD shows 1.5x NO_SHARD's bytes.
      const int64_t n = collective->size();
      const int64_t factor = op == comm::OpKind::kAllReduce ? 2 : 1;
      const int64_t wire = n > 1 ? c.bytes * factor * (n - 1) / n : 0;
      out->set_bytes_sent(wire);
      out->set_bytes_received(wire);
      out->set_seconds(absl::ToDoubleSeconds(c.busy));
    }
  }
  (void)view;
  return status;
}

v1::ProbeResponse NodeManager::Probe(bool include_model) {
  if (include_model) {
    absl::MutexLock lock(&crc_mu_);
    if (!crc_running_) {
      crc_running_ = true;
      // The previous computation has finished (it cleared crc_running_ as
      // its last step), so this join does not wait on the lock.
      if (crc_thread_.joinable()) crc_thread_.join();
      crc_thread_ = std::thread([this] { PrecomputePieceCrcs(); });
    }
  }
  v1::ProbeResponse probe;
  absl::MutexLock lock(&mu_);
  probe.set_rank(client_->rank());
  probe.set_epoch(comm_epoch_);
  probe.set_committed_step(engine_ != nullptr ? engine_->committed_step() : 0);
  probe.set_state(ReadyLocked() ? v1::MEMBER_STATE_READY
                  : recovering_ ? v1::MEMBER_STATE_RECOVERING
                                : v1::MEMBER_STATE_JOINING);
  probe.set_registered(engine_ != nullptr);
  probe.set_incarnation(client_->incarnation());
  if (include_model && engine_ != nullptr && model_.has_value()) {
    *probe.mutable_model() = ProtoConvert::ModelToProto(*model_);
    probe.set_model_fingerprint(fingerprint_);
  }
  return probe;
}

}  // namespace shardd::node
