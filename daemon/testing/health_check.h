#ifndef SHARDD_DAEMON_TESTING_HEALTH_CHECK_H_
#define SHARDD_DAEMON_TESTING_HEALTH_CHECK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace shardd::tests {

// grpc.health.v1.Health/Check of `service` over `channel`, without generated
// stubs (Debian ships no health proto for C++): the ServingStatus of the
// reply (1 SERVING, 2 NOT_SERVING, 0 UNKNOWN), or the call's status with its
// gRPC code (UNAVAILABLE when the handshake is refused, NOT_FOUND for an
// unknown service, UNIMPLEMENTED where no health service runs).
absl::StatusOr<int> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service,
                                absl::Duration timeout = absl::Seconds(5));

}  // namespace shardd::tests

#endif  // SHARDD_DAEMON_TESTING_HEALTH_CHECK_H_
