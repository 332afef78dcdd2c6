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
  registered_step_.reset();
}

void EngineHolder::NoteRegistered() {
  if (engine_ != nullptr) registered_step_ = engine_->committed_step();
}

void EngineHolder::ForgetRegistration() { registered_step_.reset(); }

bool EngineHolder::registration_state() const {
  return engine_ != nullptr && registered_step_.has_value() &&
         engine_->committed_step() == *registered_step_;
}

void EngineHolder::Reset() {
  engine_.reset();
  model_.reset();
  fingerprint_ = 0;
  agreement_.clear();
  registered_step_.reset();
}

}  // namespace shardd::node
