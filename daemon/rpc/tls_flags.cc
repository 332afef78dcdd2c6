#include "daemon/rpc/tls_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this process; with --tls_key turns TLS "
          "on for the TCP gRPC APIs (empty: TLS off, plaintext)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that sign the other side's certificates: "
          "servers then require and verify client certificates (mutual "
          "TLS), clients verify the server against it");

namespace shardd::rpc {

TlsPaths TlsPathsFromFlags() {
  TlsPaths paths;
  paths.cert = absl::GetFlag(FLAGS_tls_cert);
  paths.key = absl::GetFlag(FLAGS_tls_key);
  paths.ca = absl::GetFlag(FLAGS_tls_ca);
  return paths;
}

absl::StatusOr<TlsConfig> TlsConfigFromFlags(TlsRole role) {
  return TlsConfig::Load(TlsPathsFromFlags(), role);
}

}  // namespace shardd::rpc
