#include "daemon/node/epoch_communicators.h"

#include <utility>

namespace shardd::node {

void EpochCommunicators::Install(
    int64_t epoch, std::shared_ptr<comm::Collective> shard_group,
    std::shared_ptr<comm::Collective> replica_group) {
  shard_group_ = std::move(shard_group);
  replica_group_ = std::move(replica_group);
  epoch_ = epoch;
  failed_ = false;
  error_.clear();
}

bool EpochCommunicators::Supersede(int64_t epoch, absl::string_view why) {
  if (epoch_ >= epoch) return false;
  FailFirst(why);
  AbortAll(why);
  return true;
}

bool EpochCommunicators::Abandon(int64_t epoch, absl::string_view why) {
  if (epoch != epoch_) return false;
  FailFirst(why);
  AbortAll(why);
  return true;
}

void EpochCommunicators::MarkFailed(absl::string_view why) {
  failed_ = true;
  error_ = std::string(why);
}

void EpochCommunicators::AbortAll(absl::string_view why) {
  if (shard_group_ != nullptr) shard_group_->Abort(why);
  if (replica_group_ != nullptr) replica_group_->Abort(why);
}

std::shared_ptr<comm::Collective> EpochCommunicators::ReplicaGroupOf(
    int64_t epoch) const {
  if (epoch_ != epoch || failed_ || replica_group_ == nullptr ||
      !replica_group_->AsyncError().ok()) {
    return nullptr;
  }
  return replica_group_;
}

void EpochCommunicators::Clear() {
  shard_group_.reset();
  replica_group_.reset();
}

void EpochCommunicators::FailFirst(absl::string_view why) {
  if (failed_) return;
  failed_ = true;
  error_ = std::string(why);
}

}  // namespace shardd::node
