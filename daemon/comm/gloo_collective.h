#ifndef SHARDD_DAEMON_COMM_GLOO_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_GLOO_COLLECTIVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/queued_collective.h"
#include "daemon/comm/store.h"

namespace shardd::comm {

struct GlooCollectiveOptions {
  int rank = 0;
  int size = 1;
  // The membership epoch this communicator belongs to; rendezvous keys are
  // scoped by it, so a late rank of an old epoch can never join a new one.
  int64_t epoch = 0;
  // Names the group within the epoch ("shard/0", "replica/1", "world"), so
  // several communicators can form through one store.
  std::string group = "world";
  // The job rank of each group rank (job_ranks[r] for group rank r): the
  // rendezvous keys name it as their owner, and the coordinator lets each
  // member write its own keys only (core/rendezvous_key.h). Empty: group
  // ranks are job ranks (a group of the whole job).
  std::vector<int> job_ranks = {};
  // Address to listen on for peers (an interface address or hostname).
  std::string hostname = "127.0.0.1";
  // How long to wait for every peer to rendezvous and connect.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Deadline of an operation whose OpOptions leave it unset.
  absl::Duration default_op_timeout = absl::Seconds(30);
};

// Forms the CPU communicator of one group over Gloo's TCP transport,
// rendezvousing through `store` (borrowed for the duration of the call).
// Errors: INVALID_ARGUMENT for bad options (naming the field),
// DEADLINE_EXCEEDED when peers do not all arrive within connect_timeout,
// UNAVAILABLE when connecting fails.
absl::StatusOr<std::unique_ptr<Collective>> CreateGlooCollective(
    const GlooCollectiveOptions& options, Store& store);

// The identity of a host communicator formed with `options` over
// `transport` ("tcp", "shm"): its place, the name its errors carry, and its
// default operation deadline.
QueuedCollective::Identity CommunicatorIdentity(
    const GlooCollectiveOptions& options, std::string transport);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_COLLECTIVE_H_
