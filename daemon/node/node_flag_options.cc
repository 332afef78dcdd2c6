#include "daemon/node/node_flag_options.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/comm/host_transport.h"

namespace shardd::node {

absl::Status ApplyNodeFlags(const NodeFlagValues& flags, NodeOptions& options) {
  options.rank = flags.rank;
  options.collective_timeout = absl::Milliseconds(flags.collective_timeout_ms);
  options.connect_timeout = options.collective_timeout;
  options.verify_collectives = flags.verify_collectives;
  options.peer_probing.interval =
      absl::Milliseconds(flags.peer_probe_interval_ms);
  options.peer_probing.timeout =
      absl::Milliseconds(flags.peer_probe_timeout_ms);
  options.peer_probing.failures_to_report = flags.peer_probe_failures;
  if (options.peer_probing.interval < absl::ZeroDuration() ||
      options.peer_probing.timeout <= absl::ZeroDuration() ||
      options.peer_probing.failures_to_report < 1) {
    return absl::InvalidArgumentError(
        "--peer_probe_interval_ms must be >= 0, --peer_probe_timeout_ms > 0 "
        "and --peer_probe_failures >= 1");
  }
  options.commit_log_path = flags.commit_log;
  options.checkpoint_dir = flags.checkpoint_dir;
  options.resume_from = flags.resume_from;
  options.checkpoint_interval_steps = flags.checkpoint_interval_steps;
  options.checkpoint_keep_last = flags.checkpoint_keep_last;
  options.async_checkpoints = flags.async_checkpoints;
  if (options.checkpoint_interval_steps < 0 ||
      options.checkpoint_keep_last < 1) {
    return absl::InvalidArgumentError(
        "--checkpoint_interval_steps must be >= 0 and --checkpoint_keep_last "
        ">= 1");
  }
  if (options.checkpoint_interval_steps > 0 && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "--checkpoint_interval_steps needs --checkpoint_dir");
  }
  if (options.async_checkpoints && options.checkpoint_interval_steps == 0) {
    return absl::InvalidArgumentError(
        "--async_checkpoints needs --checkpoint_interval_steps");
  }
  if (!options.checkpoint_dir.empty() && flags.rank < 0) {
    // The rank's checkpoints are verified and reported before the join, so
    // that a rollback plan never misses them.
    return absl::InvalidArgumentError("--checkpoint_dir needs --rank");
  }
  options.recovery_timeout = absl::Milliseconds(flags.recovery_timeout_ms);
  if (flags.recovery_transport != "replica_group" &&
      flags.recovery_transport != "stream") {
    return absl::InvalidArgumentError(
        absl::StrCat("--recovery_transport: '", flags.recovery_transport,
                     "' is neither replica_group nor stream"));
  }
  options.recovery_over_replica_group =
      flags.recovery_transport == "replica_group";
  absl::StatusOr<comm::TransportMode> transport =
      comm::ParseTransportMode(flags.collective_transport);
  if (!transport.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--collective_transport: '", flags.collective_transport,
                     "' is not auto, tcp or shm"));
  }
  options.collective_transport = *transport;
  return absl::OkStatus();
}

}  // namespace shardd::node
