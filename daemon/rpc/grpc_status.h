#ifndef SHARDD_DAEMON_RPC_GRPC_STATUS_H_
#define SHARDD_DAEMON_RPC_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace shardd::rpc {

// absl::Status -> grpc::Status with the same code and message: the managers
// choose codes by how the caller should react, and the wire keeps them.
grpc::Status ToGrpc(const absl::Status& status);

// grpc::Status -> absl::Status, for clients.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_GRPC_STATUS_H_
