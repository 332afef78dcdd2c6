#ifndef SHARDD_DAEMON_NODE_ENGINE_HOLDER_H_
#define SHARDD_DAEMON_NODE_ENGINE_HOLDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "daemon/core/model_config.h"
#include "daemon/node/epoch_communicators.h"
#include "daemon/node/step_engine.h"

namespace shardd::node {

// The node's engine and the model it was built for (with the model's
// fingerprint, init excluded): what every trainer operation, copy, export
// and checkpoint works on, and the one way a new engine becomes the node's,
// whether registered, restored from a checkpoint or copied from a replica.
//
// Thread-compatible: the owner (NodeManager) guards it with its mutex.
// Shares the engine with the operations in flight on it.
class EngineHolder {
 public:
  // Null until a model is registered (or restored, or copied).
  const std::shared_ptr<StepEngine>& engine() const { return engine_; }
  // The model of engine(); only while there is one.
  const core::ModelConfig& model() const { return *model_; }
  const std::optional<core::ModelConfig>& model_if_any() const {
    return model_;
  }
  uint64_t fingerprint() const { return fingerprint_; }
  // The serialized ModelAgreement (peer.proto) the ranks registered the
  // model with; empty when the node does not know it (a checkpoint
  // restore). The node publishes it in every epoch it becomes ready in, so
  // that a rank registering the model later (its daemon died before it
  // installed the model others did) agrees with this one.
  const std::string& agreement() const { return agreement_; }

  // Makes `engine` (built for `model`, registered with `agreement`) the
  // node's. It runs on `comms`' groups when the node has any, and on each
  // later epoch's as they are installed (EpochCommunicators).
  void Install(std::shared_ptr<StepEngine> engine, core::ModelConfig model,
               uint64_t fingerprint, std::string agreement,
               const EpochCommunicators& comms);
  // The engine was just installed by a registration, at its committed
  // step (0, or the step of the saved state it imported).
  void NoteRegistered();
  // A restore into the installed engine: its state is a checkpoint's now.
  void ForgetRegistration();
  // The engine holds exactly what registering the model made: installed by
  // a registration, no step committed since (the coordinator's
  // PlanSlot::registration_state).
  bool registration_state() const;
  // Drops the engine (the owner's destruction).
  void Reset();

 private:
  std::shared_ptr<StepEngine> engine_;
  std::optional<core::ModelConfig> model_;
  uint64_t fingerprint_ = 0;
  std::string agreement_;
  // The step a registration installed the engine at (none: copied,
  // restored, or nothing installed).
  std::optional<int64_t> registered_step_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_ENGINE_HOLDER_H_
