#ifndef SHARDD_DAEMON_NODE_PEER_PROBE_POOL_H_
#define SHARDD_DAEMON_NODE_PEER_PROBE_POOL_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace shardd::node {

// Probes the Peer service of many members at once, for PeerReachability's
// rounds (NodeOptions::probe_peers): every call is asynchronous (gRPC's
// callback API), so a round costs no thread per peer, and each peer's
// channel is kept from one round to the next, so that a healthy peer costs
// one HTTP/2 request a round rather than a TCP connection and a handshake
// (at W = 256, F = 8 a daemon probes 38 peers a second; a fresh connection
// each would leave thousands of sockets in TIME_WAIT a minute).
//
// A channel whose probe failed is dropped and the peer's next probe opens a
// fresh one. A cut-off peer's old connection can sit in TCP's
// retransmission backoff for seconds after the link comes back; a fresh
// connect sees the healed link at the next round, as the channel-per-probe
// client did. Channels of addresses a round no longer names (members gone
// from this daemon's groups) are dropped too.
//
// Thread-safe (rounds may overlap; each waits for its own calls). Owns its
// channels; `credentials` are the peers' TLS (rpc::TlsConfig::
// ChannelCredentials), null for insecure.
class PeerProbePool {
 public:
  explicit PeerProbePool(
      std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  PeerProbePool(const PeerProbePool&) = delete;
  PeerProbePool& operator=(const PeerProbePool&) = delete;

  // Calls Peer.Probe on every address at once with `deadline` and waits
  // for all of them (each ends by its deadline; gRPC guarantees the
  // callback). Returns one status per address, in order: OK when it
  // answered, else the error with the address in the message.
  std::vector<absl::Status> ProbeAll(const std::vector<std::string>& addresses,
                                     MonoTime deadline);

  // Channels held now (for tests).
  int channels() const;

  // What ProbeAll reports for one address: OK when it answered OK; else
  // the error (DEADLINE_EXCEEDED when its callback never came) with the
  // address in the message.
  static absl::Status ProbeResult(bool answered, const absl::Status& status,
                                  const std::string& address);

 private:
  // Drops `address`'s channel so that its next probe connects afresh,
  // unless another round has replaced `channel` already.
  void ForgetChannel(const std::string& address,
                     const std::shared_ptr<grpc::Channel>& channel)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<grpc::Channel> ChannelFor(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_PEER_PROBE_POOL_H_
