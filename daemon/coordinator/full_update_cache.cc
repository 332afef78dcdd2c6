#include "daemon/coordinator/full_update_cache.h"

#include "daemon/coordinator/coordinator_proto.h"

namespace shardd::coordinator {

std::shared_ptr<const shardd::v1::MembershipUpdate> FullUpdateCache::Get(
    const std::shared_ptr<const ClusterSnapshot>& snapshot, bool keepalive) {
  absl::MutexLock lock(&mu_);
  if (held_ != nullptr && snapshot->version < held_->version) {
    // A stream behind the others: not worth evicting the current one.
    auto u = std::make_shared<shardd::v1::MembershipUpdate>();
    FillUpdate(*snapshot, keepalive, u.get());
    return u;
  }
  if (snapshot.get() != snapshot_) {
    snapshot_ = snapshot.get();
    held_ = snapshot;
    updates_[0].reset();
    updates_[1].reset();
  }
  std::shared_ptr<const shardd::v1::MembershipUpdate>& slot =
      updates_[keepalive ? 1 : 0];
  if (slot == nullptr) {
    auto u = std::make_shared<shardd::v1::MembershipUpdate>();
    FillUpdate(*snapshot, keepalive, u.get());
    slot = std::move(u);
  }
  return slot;
}

}  // namespace shardd::coordinator
