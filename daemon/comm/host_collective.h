#ifndef SHARDD_DAEMON_COMM_HOST_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_HOST_COLLECTIVE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/comm/host_transport.h"
#include "daemon/comm/store.h"

namespace shardd::comm {

struct HostCollectiveOptions {
  // The group, its rendezvous and timeouts, as for Gloo (which every
  // communicator formed here also runs: alone over TCP, or inside the
  // shared-memory one for Send and Recv).
  GlooCollectiveOptions gloo;
  TransportMode transport = TransportMode::kAuto;
  // Bytes of each of a rank's two shared-memory buffers: a multiple of
  // 4096, at least 64 KiB. The segment is 2 × W × slot_bytes plus 8 KiB+.
  int64_t slot_bytes = int64_t{1} << 20;
  // Tests: this rank reports that it could not map the segment.
  bool refuse_mapping_for_testing = false;
};

// Forms the CPU communicator of one group, choosing its transport: every
// rank publishes its host identity (HostIdentity) and pid through `store`
// (keys shm/<job rank>/epoch/<E>/<group>/..., each rank writing only its
// own), and all of them make the same choice (ChooseHostTransport); for
// shared memory, the Gloo communicator forms first, then group rank 0
// creates a segment with a unique name (epoch, group, random), the others
// map it, every rank publishes whether it could, and the name is unlinked
// as soon as all have answered. If any rank could not, every rank falls
// back to the Gloo communicator (ChooseAfterMapping): never a split
// decision. `chosen`, when given, receives the transport.
// Errors: those of CreateGlooCollective; INVALID_ARGUMENT naming a bad
// field; FAILED_PRECONDITION when the transport is kShm and shared memory
// is not possible; DEADLINE_EXCEEDED when peers do not all publish within
// connect_timeout.
absl::StatusOr<std::unique_ptr<Collective>> CreateHostCollective(
    const HostCollectiveOptions& options, Store& store,
    HostTransport* chosen = nullptr);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_HOST_COLLECTIVE_H_
