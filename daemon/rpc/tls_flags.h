#ifndef SHARDD_DAEMON_RPC_TLS_FLAGS_H_
#define SHARDD_DAEMON_RPC_TLS_FLAGS_H_

// The command-line flags of TlsConfig, shared by every binary that serves
// or dials the TCP gRPC APIs (coordinator, shardd, shardctl):
//   --tls_cert=PEM  this process's certificate (chain)
//   --tls_key=PEM   its private key
//   --tls_ca=PEM    the CA that signs the other side's certificates (on a
//                   server: mutual TLS, client certificates required)
//   --insecure      allow plaintext gRPC beyond this machine (see
//                   plaintext_policy.h)
// None given: TLS off, plaintext only on loopback addresses and Unix
// sockets.

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "daemon/rpc/plaintext_policy.h"
#include "daemon/rpc/tls_config.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(bool, insecure);

namespace shardd::rpc {

// The paths the flags hold.
TlsPaths TlsPathsFromFlags();

// TlsConfig::Load(TlsPathsFromFlags(), role).
absl::StatusOr<TlsConfig> TlsConfigFromFlags(TlsRole role);

// CheckPlaintextEndpoints with `tls`'s mode and --insecure. Each endpoint
// allowed only by --insecure gets a warning line on stderr, prefixed with
// `who`. Returns how many there are (for the insecure-endpoints metric), or
// the refusal.
absl::StatusOr<int> CheckPlaintextFromFlags(
    const char* who, const TlsConfig& tls,
    const std::vector<Endpoint>& endpoints);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_TLS_FLAGS_H_
