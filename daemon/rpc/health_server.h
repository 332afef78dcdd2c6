#ifndef SHARDD_DAEMON_RPC_HEALTH_SERVER_H_
#define SHARDD_DAEMON_RPC_HEALTH_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/rpc/health_service.h"
#include "grpcpp/grpcpp.h"

namespace shardd::rpc {

// A plaintext gRPC server that serves grpc.health.v1 and nothing else, so
// that probes which cannot present credentials (kubelet's gRPC probes)
// reach the health statuses while every API port requires TLS. Any other
// method is UNIMPLEMENTED here. It serves the same HealthService object as
// the owner's API servers, so one SetServingStatus updates both ports.
//
// Thread-safe. Owns its server, not the service (which must outlive it);
// destruction shuts the server down. Call the service's Shutdown first so
// that open Watch streams end at once.
class HealthServer {
 public:
  // Listens on `address` (HOST:PORT, port 0: any free one; `flag` names the
  // flag in errors) and serves `health` there. INVALID_ARGUMENT for a
  // malformed address, UNAVAILABLE when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(
      const std::string& address, absl::string_view flag,
      HealthService* health);

  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  // "HOST:PORT" with the port bound (brackets around an IPv6 host).
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  HealthServer(std::unique_ptr<grpc::Server> server, std::string address,
               int port);

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_;
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_HEALTH_SERVER_H_
