#ifndef SHARDD_DAEMON_RPC_EXCLUSIVE_PORT_H_
#define SHARDD_DAEMON_RPC_EXCLUSIVE_PORT_H_

#include "grpcpp/server_builder.h"

namespace shardd::rpc {

// Makes every TCP port `builder` listens on this server's alone: binding a
// port another socket already listens on fails (the server does not start)
// instead of sharing it.
//
// gRPC sets SO_REUSEPORT on Linux by default, so a second server bound to
// an explicit port that is in use starts without complaint and the kernel
// splits the incoming connections between the two processes. For a
// coordinator restarted on its port while the old one (hung, or another
// job's process that took the freed port) still listens, that is split
// brain: members' heartbeats and reports land at random on either. Every
// shardd and coordinator server calls this before BuildAndStart.
void ForbidPortSharing(grpc::ServerBuilder& builder);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_EXCLUSIVE_PORT_H_
