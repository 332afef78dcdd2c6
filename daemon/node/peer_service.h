#ifndef SHARDD_DAEMON_NODE_PEER_SERVICE_H_
#define SHARDD_DAEMON_NODE_PEER_SERVICE_H_

#include <atomic>

#include "daemon/node/node_manager.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

namespace shardd::node {

// The Peer gRPC service. It must listen before the daemon joins (the
// coordinator needs its address), so the manager is attached afterwards;
// until then Probe and FetchShard are UNAVAILABLE. FetchShard streams this
// daemon's shard to a replacement (NodeManager::ServeShard).
class PeerService final : public v1::Peer::Service {
 public:
  void Attach(NodeManager* manager) { manager_.store(manager); }

  grpc::Status Probe(grpc::ServerContext* context,
                     const v1::ProbeRequest* request,
                     v1::ProbeResponse* response) override;
  grpc::Status FetchShard(
      grpc::ServerContext* context, const v1::FetchShardRequest* request,
      grpc::ServerWriter<v1::FetchShardResponse>* writer) override;

 private:
  std::atomic<NodeManager*> manager_{nullptr};
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_PEER_SERVICE_H_
