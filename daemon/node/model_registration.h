#ifndef SHARDD_DAEMON_NODE_MODEL_REGISTRATION_H_
#define SHARDD_DAEMON_NODE_MODEL_REGISTRATION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/comm/store.h"
#include "daemon/core/model_config.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/engine_admission.h"
#include "daemon/node/engine_backend.h"
#include "daemon/node/membership.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/commit_log.h"
#include "daemon/state/state_import.h"
#include "shardd/v1/common.pb.h"
#include "shardd/v1/peer.pb.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// The node's state a registration starts from, read under the node's lock
// in one go.
struct NodeModelState {
  // The coordinator's W and F (0 before the first epoch is formed).
  int world_size = 0;
  int sharding_factor = 0;
  // The epoch of the node's current communicators.
  int64_t epoch = 0;
  // The engine and its model when a model is registered (null / nullopt
  // otherwise).
  std::shared_ptr<StepEngine> engine;
  std::optional<core::ModelConfig> model;
};

// What a model registration needs of the node it runs on (NodeManager
// implements it): a ready epoch, the node's topology and engine, the
// trainer's detach and the epoch abandon of a re-attach, the rendezvous
// store of an epoch, the engine install and the commit log. Methods may
// take the node's mutex; ModelRegistration never holds it when it calls
// them, at most TrainerOpMutex() (which is taken before it).
class ModelRegistrationHost {
 public:
  virtual ~ModelRegistrationHost() = default;
  // Waits until the node is in a ready epoch (any epoch) and returns it;
  // DEADLINE_EXCEEDED at the deadline, UNAVAILABLE when the daemon shuts
  // down or its membership ended, DATA_LOSS once the job failed.
  virtual absl::StatusOr<int64_t> AwaitReadyEpoch(MonoTime deadline) = 0;
  // The daemon is shutting down (SIGTERM): a registration waiting for the
  // other ranks ends with UNAVAILABLE instead of holding the shutdown until
  // its deadline.
  virtual bool Stopping() const = 0;
  // Serialises a registration with the trainer operations
  // (TrainerOps::op_mutex()).
  virtual absl::Mutex& TrainerOpMutex() = 0;
  // W, F, the communicators' epoch and the registered engine, read
  // together.
  virtual NodeModelState ModelState() = 0;
  // A new trainer process attached to `engine`: what the old one held is
  // released (TrainerOps::Detach). True when the old one left a step
  // half-way. Called with TrainerOpMutex() held.
  virtual bool DetachTrainer(StepEngine& engine) = 0;
  // Abandons the communicators of `epoch` (if they are still the current
  // ones) and reports the failure to the coordinator.
  virtual void AbandonEpoch(absl::string_view why, v1::FailureKind kind,
                            int64_t epoch) = 0;
  // A rendezvous store client for `epoch`, with this rank's lease token.
  virtual std::unique_ptr<comm::Store> StoreOfEpoch(int64_t epoch) = 0;
  // Installs a newly registered engine (the node's one install path: the
  // trainer protocol starts over) with the agreement the ranks registered
  // it with (a serialized v1::ModelAgreement), which the node publishes in
  // each later epoch (PublishHeld). Returns the communicators' epoch, read
  // under the same lock.
  virtual int64_t InstallRegistered(std::shared_ptr<StepEngine> engine,
                                    core::ModelConfig model,
                                    uint64_t fingerprint,
                                    std::string agreement) = 0;
  // Appends to the commit log, if configured.
  virtual void LogCommit(recovery::CommitRecord::Kind kind, int64_t step,
                         int64_t epoch) = 0;
  // Tells the observer (if any) what the engine's buffers hold.
  virtual void ReportMemory(const StepEngine& engine) const = 0;
  // The registered engine as a RegisterModelResponse describes it, read
  // under one lock: committed step, epoch, topology, memory report and
  // fingerprint (`reattached` is left to the caller). Called only when an
  // engine is registered.
  virtual v1::RegisterModelResponse RegisteredModel() = 0;
};

struct ModelRegistrationOptions {
  // Names this rank; told the step a registration resumes at (SetReady).
  // Not owned; must outlive the ModelRegistration.
  Membership* membership = nullptr;
  // Not owned; must outlive the ModelRegistration.
  ModelRegistrationHost* host = nullptr;
  // Where engines keep their memory. Not owned; must outlive the
  // ModelRegistration and every engine it creates.
  EngineBackend* backend = nullptr;
  // Decides whether an engine (and the copy of its initial values) fits.
  // Not owned; never null.
  EngineAdmission* admission = nullptr;
  // shardd's --resume_from: the checkpoint directory a registration that
  // names no source of its own resumes from. Empty: none.
  std::string resume_from;
};

// Trainer.RegisterModel on this rank: validates the request against this
// daemon's backend, re-attaches a new trainer process to the model the
// node holds, or registers a new model: the ranks agree on it through the
// epoch's rendezvous store (ExchangeModel), then each creates its engine,
// materialises its shard of the initial values, applies the saved state a
// request names and installs the engine through the host. Also creates the
// engines of a shard copy and a checkpoint restore (CreateEngine).
//
// Owns nothing but its options; the engines it creates go to the host (or
// the caller of CreateEngine). Thread-safe: RegisterModel serialises itself
// with the trainer operations through the host's TrainerOpMutex();
// CreateEngine may run on any thread.
class ModelRegistration {
 public:
  explicit ModelRegistration(ModelRegistrationOptions options);

  // Status codes as trainer.proto documents for RegisterModel.
  absl::StatusOr<v1::RegisterModelResponse> RegisterModel(
      const v1::RegisterModelRequest& request, MonoTime deadline);

  // Publishes `agreement` (the serialized v1::ModelAgreement of the model
  // the node holds; nothing when empty) as `rank`'s model in `store`,
  // `epoch`'s. Ranks agree on a new model in one epoch, and an epoch can
  // end while some have installed it and others have not (a daemon killed
  // during the exchange): the ones that did never register again, so the
  // others, registering in a later epoch, would wait for them for good.
  // Holders publish in every epoch before they report READY. A failure is
  // logged: the next epoch publishes again.
  static void PublishHeld(comm::Store& store, int rank,
                          const std::string& agreement, int64_t epoch);

  // A StepEngine for `model` on this rank (layouts for F = `factor`,
  // optimizer, admission), its shard filled by `init`.
  absl::StatusOr<std::unique_ptr<StepEngine>> CreateEngine(
      const core::ModelConfig& model, int world, int factor,
      const ShardInitializer& init);

 private:
  // The request checked against this daemon alone (transport, model,
  // device inits, the init copy's memory): the model it registers.
  absl::StatusOr<core::ModelConfig> Validate(
      const v1::RegisterModelRequest& request) const;
  // A new trainer process on the model `state` holds: FAILED_PRECONDITION
  // when `model` differs; otherwise the old trainer is detached (the epoch
  // abandoned when it left a step half-way) and the node's engine is
  // described. Call with the op mutex held.
  absl::StatusOr<v1::RegisterModelResponse> Reattach(
      const NodeModelState& state, const core::ModelConfig& model);
  // The first registration on this rank, in `epoch`. Call with the op
  // mutex held.
  absl::StatusOr<v1::RegisterModelResponse> RegisterNew(
      const v1::RegisterModelRequest& request, const core::ModelConfig& model,
      const NodeModelState& state, int64_t epoch, MonoTime deadline);
  // The model checked against the coordinator's W and F.
  static absl::Status CheckTopology(const core::ModelConfig& model, int world,
                                    int factor);
  // The ranks' agreement on the model (its digests and the saved state's),
  // published and compared with every other rank's in `epoch`'s store.
  absl::Status ExchangeModel(int64_t epoch, int world,
                             const v1::ModelAgreement& agreement,
                             MonoTime deadline);
  // Waits until rank `r`'s key holds an unmarked agreement equal to mine;
  // `before` is its value as this attempt began (a failed key waited past).
  absl::Status AwaitAgreement(comm::Store& store, int r,
                              const v1::ModelAgreement& mine,
                              const std::string& before, MonoTime deadline);
  // An engine installed by a registration: the step it starts at (the
  // saved state's, 0 without one) and the communicators' epoch then.
  struct Installed {
    std::shared_ptr<StepEngine> engine;
    int64_t step = 0;
    int64_t epoch = 0;
  };
  // Creates the engine, fills it (initial values, then the saved state)
  // and installs it through the host with `agreement` (serialized).
  absl::StatusOr<Installed> BuildAndInstall(const core::ModelConfig& model,
                                            int world, int factor,
                                            const state::StateImport& import,
                                            std::string agreement);

  const ModelRegistrationOptions options_;
  // Whether the backend's buffers are a device's (CUDA IPC transport).
  const bool device_memory_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_MODEL_REGISTRATION_H_
