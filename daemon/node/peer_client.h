#ifndef SHARDD_DAEMON_NODE_PEER_CLIENT_H_
#define SHARDD_DAEMON_NODE_PEER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "grpcpp/security/credentials.h"
#include "shardd/v1/peer.pb.h"

namespace shardd::node {

// The client side of the Peer service, as the plain functions NodeOptions
// takes (fetch_shard, probe_peer), so that NodeManager holds no gRPC code:
// shardd_main binds `credentials` (rpc::TlsConfig::ChannelCredentials, the
// peers' TLS; null: insecure) in a lambda.
//
// Each call opens its own channel to `peer_address` (recovery is rare and
// the address changes with membership); the channel accepts messages of up
// to 64 MiB (FetchShard chunks are at most 16 MiB) and uses a fixed 8 MiB
// HTTP/2 stream window (no BDP probing: see peer_client.cc). Thread-safe:
// no shared state.
class PeerClient {
 public:
  // Streams Peer.FetchShard, handing each message to `on_message`; an error
  // from it cancels the stream and is returned. gRPC errors map to
  // absl::Status with the peer's address in the message.
  static absl::Status FetchShard(
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const std::string& peer_address, const v1::FetchShardRequest& request,
      MonoTime deadline,
      const std::function<absl::Status(const v1::FetchShardResponse&)>&
          on_message);

  static absl::StatusOr<v1::ProbeResponse> Probe(
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const std::string& peer_address, MonoTime deadline,
      bool include_model = false);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_PEER_CLIENT_H_
