#include "daemon/node/engine_holder.h"

#include <utility>

namespace shardd::node {

void EngineHolder::Install(std::shared_ptr<StepEngine> engine,
                           core::ModelConfig model, uint64_t fingerprint,
                           const EpochCommunicators& comms) {
  if (comms.shard_group() != nullptr) {
    engine->SetCommunicators(comms.shard_group(), comms.replica_group());
  }
  engine_ = std::move(engine);
  model_ = std::move(model);
  fingerprint_ = fingerprint;
}

void EngineHolder::Reset() {
  engine_.reset();
  model_.reset();
  fingerprint_ = 0;
}

}  // namespace shardd::node
