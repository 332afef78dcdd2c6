#ifndef SHARDD_CLIENT_CLUSTER_REPORT_H_
#define SHARDD_CLIENT_CLUSTER_REPORT_H_

#include <string>

#include "absl/time/time.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::client {

// The coordinator's GetClusterState as shardctl cluster shows it to an
// operator, lines ending in "\n":
//   the job (RUNNING / FAILED with the reason), epoch and readiness, W, F,
//   the committed step, the lease and the epoch's plan;
//   members: one row per slot (rank, state, peer address, identity, step,
//   device, lease left at `now`; every member is in the header's epoch);
//   broken links: the member pairs that both report each other
//   unreachable, with their addresses ("none" when every link is up);
//   quarantined peer addresses, then recovery plans (most recent first);
//   decisions: the coordinator's recent decisions as a timeline, oldest
//   first, each with its UTC time.
// Pure: `now` only measures what leases have left.
std::string ClusterReport(const v1::ClusterState& state, absl::Time now);

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_CLUSTER_REPORT_H_
