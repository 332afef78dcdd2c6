#ifndef SHARDD_DAEMON_RPC_TLS_FLAGS_H_
#define SHARDD_DAEMON_RPC_TLS_FLAGS_H_

// The command-line flags of TlsConfig, shared by every binary that serves
// or dials the TCP gRPC APIs (coordinator, shardd, shardctl):
//   --tls_cert=PEM  this process's certificate (chain)
//   --tls_key=PEM   its private key
//   --tls_ca=PEM    the CA that signs the other side's certificates (on a
//                   server: mutual TLS, client certificates required)
// None given: TLS off (plaintext, as before).

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "daemon/rpc/tls_config.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);

namespace shardd::rpc {

// The paths the flags hold.
TlsPaths TlsPathsFromFlags();

// TlsConfig::Load(TlsPathsFromFlags(), role).
absl::StatusOr<TlsConfig> TlsConfigFromFlags(TlsRole role);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_TLS_FLAGS_H_
