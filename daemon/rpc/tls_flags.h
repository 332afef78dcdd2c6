#ifndef SHARDD_DAEMON_RPC_TLS_FLAGS_H_
#define SHARDD_DAEMON_RPC_TLS_FLAGS_H_

// The command-line flags of TlsConfig, shared by every binary that serves
// or dials the TCP gRPC APIs (coordinator, shardd, shardctl):
//   --tls_cert=PEM  this process's certificate (chain)
//   --tls_key=PEM   its private key
//   --tls_ca=PEM    the CA that signs the other side's certificates (on a
//                   server: mutual TLS, client certificates required)
//   --tls_refresh_interval=DURATION  how often the three files are read
//                   again (default 60s): a rotated certificate is used
//                   without a restart (TlsConfig)
//   --insecure      allow plaintext gRPC beyond this machine (see
//                   plaintext_policy.h)
// None given: TLS off, plaintext only on loopback addresses and Unix
// sockets.

#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/rpc/plaintext_policy.h"
#include "daemon/rpc/tls_config.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(absl::Duration, tls_refresh_interval);
ABSL_DECLARE_FLAG(bool, insecure);

namespace shardd::rpc {

// The paths the flags hold.
TlsPaths TlsPathsFromFlags();

// TlsConfig::Load(TlsPathsFromFlags(), role) with --tls_refresh_interval;
// `who` prefixes the reload log lines.
absl::StatusOr<TlsConfig> TlsConfigFromFlags(TlsRole role,
                                             const std::string& who = "tls");

// CheckPlaintextEndpoints with `tls`'s mode and --insecure. Each endpoint
// allowed only by --insecure gets a warning line on stderr, prefixed with
// `who`. Returns how many there are (for the insecure-endpoints metric), or
// the refusal.
absl::StatusOr<int> CheckPlaintextFromFlags(
    const char* who, const TlsConfig& tls,
    const std::vector<Endpoint>& endpoints);

// What a server program's TLS flags give it: the credentials of its
// servers and of its channels, whether TLS is on, and how many endpoints
// carry plaintext beyond this machine (allowed by --insecure). Keep it for
// as long as the credentials are used: `config` keeps reloading the files
// they read.
struct ServerTls {
  TlsConfig config;
  bool enabled = false;
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  int insecure_endpoints = 0;
};

// For the server program `who` (coordinator, shardd): loads the flags
// (TlsRole::kServer), prints the TLS mode on stderr ("<who>: TLS ..."),
// checks `endpoints` (CheckPlaintextFromFlags) and, with TLS on and no
// --health_listen (`health_listen` empty), warns that probes cannot reach
// grpc.health.v1. An error's message is the line the program prints after
// "<who>: " (for a flag or credential error, that status's ToString()).
absl::StatusOr<ServerTls> ServerTlsFromFlags(
    const char* who, const std::vector<Endpoint>& endpoints,
    const std::string& health_listen);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_TLS_FLAGS_H_
