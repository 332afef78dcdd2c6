#ifndef SHARDD_DAEMON_COORDINATOR_FULL_UPDATE_CACHE_H_
#define SHARDD_DAEMON_COORDINATOR_FULL_UPDATE_CACHE_H_

#include <cstdint>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::coordinator {

// The full MembershipUpdate (every live member) of the current version,
// built once and shared by every WatchMembership stream that is not
// scoped (daemons that predate scoped streams, tools), instead of one
// W-member message built and destroyed per stream per change.
//
// Thread-safe. Keeps the latest version's update and keepalive.
class FullUpdateCache {
 public:
  // The update for `snapshot` (as a keepalive or not), built on first use.
  std::shared_ptr<const shardd::v1::MembershipUpdate> Get(
      const std::shared_ptr<const ClusterSnapshot>& snapshot, bool keepalive);

 private:
  absl::Mutex mu_;
  const ClusterSnapshot* snapshot_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Holds snapshot_ alive, so that its address names it.
  std::shared_ptr<const ClusterSnapshot> held_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const shardd::v1::MembershipUpdate>
      updates_[2] ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_FULL_UPDATE_CACHE_H_
