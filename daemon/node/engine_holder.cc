#include "daemon/node/engine_holder.h"

#include <utility>

namespace shardd::node {

void EngineHolder::Install(std::shared_ptr<StepEngine> engine,
                           core::ModelConfig model, uint64_t fingerprint,
                           std::string agreement,
                           const EpochCommunicators& comms) {
  if (comms.shard_group() != nullptr) {
    engine->SetCommunicators(comms.shard_group(), comms.replica_group());
  }
  engine_ = std::move(engine);
  model_ = std::move(model);
  fingerprint_ = fingerprint;
  agreement_ = std::move(agreement);
}

void EngineHolder::Reset() {
  engine_.reset();
  model_.reset();
  fingerprint_ = 0;
  agreement_.clear();
}

}  // namespace shardd::node
