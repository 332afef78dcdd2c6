#include "daemon/node/group_spec.h"

#include <algorithm>

namespace shardd::node {

comm::GlooCollectiveOptions ToGlooOptions(const GroupSpec& spec) {
  comm::GlooCollectiveOptions options;
  options.rank = spec.rank;
  options.size = spec.size;
  options.epoch = spec.epoch;
  options.group = spec.group;
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
