#ifndef SHARDD_DAEMON_NODE_GROUP_SPEC_H_
#define SHARDD_DAEMON_NODE_GROUP_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/comm/gloo_collective.h"

namespace shardd::node {

// One communicator NodeManager asks its EngineBackend for: which group of
// which membership epoch, this daemon's place in it, and its timeouts. It
// says nothing about the library underneath; each backend maps it to its
// own options (ToGlooOptions here; the CUDA backend to NCCL's, with
// NcclGroupName).
struct GroupSpec {
  int rank = 0;
  int size = 1;
  int64_t epoch = 0;
  // "shard/<i>" or "replica/<j>": unique within the epoch.
  std::string group;
  // The job rank of each group rank (job_ranks[rank] is this daemon's):
  // the rendezvous keys a communicator writes are owned by its writer's
  // job rank (core/rendezvous_key.h). Empty: group ranks are job ranks.
  std::vector<int> job_ranks = {};
  // Where a TCP transport (Gloo) listens for its peers. NCCL chooses its
  // own interfaces and ignores it.
  std::string listen_host = "127.0.0.1";
  // How long to wait for every peer to rendezvous and connect.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Deadline of an operation whose OpOptions leave it unset.
  absl::Duration default_op_timeout = absl::Seconds(30);
};

// The job ranks of `rank`'s shard group ([g·F, (g+1)·F), g = rank / F) and
// of its replica group (the ranks r' with r' mod F = rank mod F), by group
// rank: GroupSpec::job_ranks. F must be >= 1 and divide W.
std::vector<int> ShardGroupJobRanks(int rank, int sharding_factor);
std::vector<int> ReplicaGroupJobRanks(int rank, int world_size,
                                      int sharding_factor);

// The Gloo communicator's options for `spec` (field for field).
comm::GlooCollectiveOptions ToGlooOptions(const GroupSpec& spec);

// `group` as NCCL's store keys accept it ([A-Za-z0-9_.-]+): "shard/0"
// becomes "shard.0". Distinct groups of one epoch stay distinct because
// our group names never contain '.'.
std::string NcclGroupName(absl::string_view group);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_GROUP_SPEC_H_
