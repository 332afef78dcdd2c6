#include "daemon/node/group_spec.h"

#include <algorithm>

namespace shardd::node {

std::vector<int> ShardGroupJobRanks(int rank, int sharding_factor) {
  std::vector<int> ranks;
  for (int i = 0; i < sharding_factor; ++i) {
    ranks.push_back(rank - rank % sharding_factor + i);
  }
  return ranks;
}

std::vector<int> ReplicaGroupJobRanks(int rank, int world_size,
                                      int sharding_factor) {
  std::vector<int> ranks;
  for (int j = 0; j < world_size / sharding_factor; ++j) {
    ranks.push_back(j * sharding_factor + rank % sharding_factor);
  }
  return ranks;
}

comm::GlooCollectiveOptions ToGlooOptions(const GroupSpec& spec) {
  comm::GlooCollectiveOptions options;
  options.rank = spec.rank;
  options.size = spec.size;
  options.epoch = spec.epoch;
  options.group = spec.group;
  options.job_ranks = spec.job_ranks;
  options.hostname = spec.listen_host;
  options.connect_timeout = spec.connect_timeout;
  options.default_op_timeout = spec.default_op_timeout;
  return options;
}

std::string NcclGroupName(absl::string_view group) {
  std::string name(group);
  std::replace(name.begin(), name.end(), '/', '.');
  return name;
}

}  // namespace shardd::node
