#ifndef SHARDD_DAEMON_RPC_PLAINTEXT_POLICY_H_
#define SHARDD_DAEMON_RPC_PLAINTEXT_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardd::rpc {

// One gRPC endpoint a process listens on or dials, as its flag gives it.
struct Endpoint {
  std::string flag;     // "--listen", "--coordinator", ...
  std::string address;  // "host:port", "[v6]:port", "unix:/path" or a path
};

// Whether plaintext gRPC on `address` stays on this machine: a Unix socket
// ("unix:..." or a path), or a loopback host (127.0.0.0/8, ::1, localhost).
// Anything else (a wildcard, a pod IP, a DNS name) leaves it. Pure.
bool StaysOnThisMachine(absl::string_view address);

// Secure by default: without TLS, every endpoint must stay on this machine
// unless the operator passed --insecure on purpose. Returns the endpoints
// that leave the machine in plaintext (allowed only with `insecure`), or
// FAILED_PRECONDITION naming the first such flag and address and the two
// ways out (TLS flags, or --insecure). With TLS on there is nothing to check.
// Pure.
absl::Status CheckPlaintextEndpoints(const std::vector<Endpoint>& endpoints,
                                     bool tls_enabled, bool insecure,
                                     std::vector<Endpoint>* exposed);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_PLAINTEXT_POLICY_H_
