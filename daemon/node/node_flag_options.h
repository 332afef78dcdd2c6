#ifndef SHARDD_DAEMON_NODE_NODE_FLAG_OPTIONS_H_
#define SHARDD_DAEMON_NODE_NODE_FLAG_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "daemon/node/node_manager.h"

namespace shardd::node {

// The values of shardd's flags that set NodeOptions fields as they are:
// the slot, timeouts, peer probing, the commit log, checkpoints, the
// recovery transport and the collective transport. Defaults are the flags'
// defaults.
struct NodeFlagValues {
  int rank = -1;
  int64_t collective_timeout_ms = 30000;
  int64_t peer_probe_interval_ms = 1000;
  int64_t peer_probe_timeout_ms = 2000;
  int peer_probe_failures = 3;
  std::string commit_log;
  std::string checkpoint_dir;
  int64_t checkpoint_interval_steps = 0;
  int checkpoint_keep_last = 2;
  bool async_checkpoints = false;
  std::string resume_from;
  int64_t recovery_timeout_ms = 120000;
  std::string recovery_transport = "replica_group";
  std::string collective_transport = "auto";
  bool verify_collectives = false;
};

// Checks `flags` and sets the fields of `options` they configure (others
// are left alone). INVALID_ARGUMENT naming the flags, with the text shardd
// prints, when a value or a combination is refused; the checks run in a
// fixed order and the first refusal is returned, `options` then partly set.
absl::Status ApplyNodeFlags(const NodeFlagValues& flags, NodeOptions& options);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_NODE_FLAG_OPTIONS_H_
