#ifndef SHARDD_DAEMON_NODE_ENGINE_HOLDER_H_
#define SHARDD_DAEMON_NODE_ENGINE_HOLDER_H_

#include <cstdint>
#include <memory>
#include <optional>

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

  // Makes `engine` (built for `model`) the node's. It runs on `comms`'
  // groups when the node has any, and on each later epoch's as they are
  // installed (EpochCommunicators).
  void Install(std::shared_ptr<StepEngine> engine, core::ModelConfig model,
               uint64_t fingerprint, const EpochCommunicators& comms);
  // Drops the engine (the owner's destruction).
  void Reset();

 private:
  std::shared_ptr<StepEngine> engine_;
  std::optional<core::ModelConfig> model_;
  uint64_t fingerprint_ = 0;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_ENGINE_HOLDER_H_
