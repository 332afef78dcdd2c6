#ifndef SHARDD_TESTS_COORDINATOR_PORT_HOLDER_H_
#define SHARDD_TESTS_COORDINATOR_PORT_HOLDER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/rpc/health_service.h"
#include "grpcpp/grpcpp.h"

namespace shardd::tests {

// A gRPC server on 127.0.0.1 with gRPC's default options, which are willing
// to share their port (SO_REUSEPORT): what our binaries must refuse to
// join when told to listen on port().
//
// Not thread-safe. Owns its server and service; stops on destruction.
class PortHolder {
 public:
  // INTERNAL if no server could be started.
  static absl::StatusOr<std::unique_ptr<PortHolder>> Start();
  ~PortHolder();

  int port() const { return port_; }

 private:
  PortHolder() = default;

  rpc::HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace shardd::tests

#endif  // SHARDD_TESTS_COORDINATOR_PORT_HOLDER_H_
