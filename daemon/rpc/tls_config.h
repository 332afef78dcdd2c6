#ifndef SHARDD_DAEMON_RPC_TLS_CONFIG_H_
#define SHARDD_DAEMON_RPC_TLS_CONFIG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace shardd::rpc {

// PEM file paths as the --tls_cert, --tls_key and --tls_ca flags give them
// (tls_flags.h). Empty: not given.
struct TlsPaths {
  // This process's certificate (chain), presented to whoever connects (as a
  // server) or to the server (as an mTLS client).
  std::string cert;
  // The private key of `cert`.
  std::string key;
  // The CA that signs the other side's certificates: a server verifies
  // client certificates against it (mutual TLS), a client the server's.
  std::string ca;
};

// Whether the process serves gRPC (and so needs a certificate of its own)
// or only dials.
enum class TlsRole { kServer, kClient };

// The transport security of one process's TCP gRPC endpoints, read from PEM
// files once, at Load:
//  - No path given: TLS off. Both credentials are insecure (plaintext), as
//    before this existed.
//  - kServer: once any path is given, --tls_cert and --tls_key are both
//    required. Servers use TLS; with --tls_ca they require and verify a
//    client certificate signed by that CA (mutual TLS), without it they ask
//    for none.
//  - kClient: --tls_cert and --tls_key come as a pair (the client
//    certificate of mutual TLS, optional); --tls_ca verifies the server
//    (without it, gRPC's default roots do).
// Channels created with ChannelCredentials() check that the server's
// certificate names the host dialled (a DNS or IP subject alternative name).
//
// Errors name the flag and the path: NOT_FOUND for a file that does not
// exist, PERMISSION_DENIED for one that cannot be read, INVALID_ARGUMENT for
// a missing partner flag, a directory, an empty or oversized file, or a
// file without the PEM block it must hold. Never throws.
//
// Thread-safety: immutable after Load; copies share nothing mutable. The
// credentials returned are new objects, safe to use from any thread.
class TlsConfig {
 public:
  // TLS off.
  TlsConfig() = default;

  static absl::StatusOr<TlsConfig> Load(const TlsPaths& paths, TlsRole role);

  bool enabled() const { return enabled_; }
  // Server: client certificates are required and verified. Client: a client
  // certificate is presented.
  bool mutual() const {
    return enabled_ && !cert_pem_.empty() &&
           (role_ == TlsRole::kClient || !ca_pem_.empty());
  }
  bool has_certificate() const { return !cert_pem_.empty(); }

  // Insecure when off; TLS (mutual with a CA) when on. FAILED_PRECONDITION
  // when on without a certificate (a kClient config).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials()
      const;
  // Insecure when off; TLS with the CA as roots (default roots without one)
  // and the certificate and key as the client identity when given.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

  // One line for the log: "TLS off: ..." or what is on, with the paths.
  std::string Describe() const;

 private:
  bool enabled_ = false;
  TlsRole role_ = TlsRole::kServer;
  TlsPaths paths_;
  std::string cert_pem_;
  std::string key_pem_;
  std::string ca_pem_;
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_TLS_CONFIG_H_
