#ifndef SHARDD_DAEMON_NODE_COORDINATOR_PORTS_H_
#define SHARDD_DAEMON_NODE_COORDINATOR_PORTS_H_

#include <memory>
#include <string>

#include "daemon/node/node_manager.h"
#include "grpcpp/security/credentials.h"

namespace shardd::node {

// Wires a node to the coordinator at `address` (host:port) over gRPC, with
// `credentials` on every channel (null: insecure): its Membership is a
// MemberClient (join, heartbeats, watch, READY, reports, the commit vote)
// and each epoch's rendezvous store a CoordinatorStore. Sets
// options->join_membership and options->store_of_epoch; the node itself
// holds no gRPC code.
void UseCoordinator(const std::string& address,
                    std::shared_ptr<grpc::ChannelCredentials> credentials,
                    NodeOptions* options);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_COORDINATOR_PORTS_H_
