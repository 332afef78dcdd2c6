#ifndef SHARDD_DAEMON_CORE_HOST_PORT_H_
#define SHARDD_DAEMON_CORE_HOST_PORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::core {

struct HostPort {
  std::string host;  // Without brackets for IPv6 literals.
  int port = 0;
};

// Parses "host:port", "1.2.3.4:port" or "[::1]:port" with port in
// [1, 65535]. `field` names the flag or message field in the error
// (INVALID_ARGUMENT), e.g. "peer_address: missing port in \"node1\"".
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text,
                                       absl::string_view field);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_HOST_PORT_H_
