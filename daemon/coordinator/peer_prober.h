#ifndef SHARDD_DAEMON_COORDINATOR_PEER_PROBER_H_
#define SHARDD_DAEMON_COORDINATOR_PEER_PROBER_H_

#include <memory>

#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "grpcpp/security/credentials.h"

namespace shardd::coordinator {

// A Prober that calls Peer.Probe on the member's peer address with a short
// deadline: answered -> kAlive; refused, reset or timed out -> kUnreachable.
// A stopped (SIGSTOP) process still accepts TCP connections in the kernel,
// which is why this is an RPC and not a connect(). `credentials` are those
// of the peers' TLS (rpc::TlsConfig::ChannelCredentials); null: insecure.
// A peer that refuses the handshake is kUnreachable too.
Prober MakePeerProber(
    absl::Duration timeout,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_PEER_PROBER_H_
