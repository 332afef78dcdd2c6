#ifndef SHARDD_DAEMON_COORDINATOR_PEER_PROBER_H_
#define SHARDD_DAEMON_COORDINATOR_PEER_PROBER_H_

#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"

namespace shardd::coordinator {

// A Prober that calls Peer.Probe on the member's peer address with a short
// deadline: answered -> kAlive; refused, reset or timed out -> kUnreachable.
// A stopped (SIGSTOP) process still accepts TCP connections in the kernel,
// which is why this is an RPC and not a connect().
Prober MakePeerProber(absl::Duration timeout);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_PEER_PROBER_H_
