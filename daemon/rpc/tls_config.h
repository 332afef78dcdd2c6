#ifndef SHARDD_DAEMON_RPC_TLS_CONFIG_H_
#define SHARDD_DAEMON_RPC_TLS_CONFIG_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/rpc/certificate_mirror.h"
#include "daemon/rpc/tls_pem.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"

namespace shardd::rpc {

// Whether the process serves gRPC (and so needs a certificate of its own)
// or only dials.
enum class TlsRole { kServer, kClient };

// How TLS files given at start are watched afterwards.
struct TlsReloadOptions {
  // How often the files are read again (--tls_refresh_interval); at least
  // one second.
  absl::Duration interval = absl::Seconds(60);
  // Prefix of the reload log lines ("shardd", "coordinator").
  std::string who = "tls";
};

// The transport security of one process's TCP gRPC endpoints:
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
// Rotation without restart: Load reads and checks the files (ReadTlsPem:
// they parse and the key is the certificate's), then a CertificateMirror
// reads them again every `reload.interval` and publishes each good new set
// to gRPC's FileWatcherCertificateProvider, which every credential made
// here is built on (it looks at the published copy every second). New
// connections present the new certificate and verify with the new CA;
// established connections keep theirs. A set that fails the checks (a
// rotation half written, a missing file) is logged and skipped: the last
// good one stays in use.
//
// Errors at Load name the flag and the path: NOT_FOUND for a file that does
// not exist, PERMISSION_DENIED for one that cannot be read, INVALID_ARGUMENT
// for a missing partner flag, a directory, an empty or oversized file, a
// file without the PEM block it must hold or whose block does not parse, a
// key that is not the certificate's, or an interval under one second.
// Never throws.
//
// Thread-safety: immutable after Load; copies share the mirror, which is
// thread-safe. The credentials returned are new objects, safe to use from
// any thread; they read the mirror's copies, so keep a TlsConfig (any copy)
// for as long as they are used, or they stop following rotations.
class TlsConfig {
 public:
  // TLS off.
  TlsConfig() = default;

  static absl::StatusOr<TlsConfig> Load(const TlsPaths& paths, TlsRole role,
                                        const TlsReloadOptions& reload = {});

  bool enabled() const { return enabled_; }
  // Server: client certificates are required and verified. Client: a client
  // certificate is presented.
  bool mutual() const {
    return enabled_ && !paths_.cert.empty() &&
           (role_ == TlsRole::kClient || !paths_.ca.empty());
  }
  bool has_certificate() const { return !paths_.cert.empty(); }

  // Insecure when off; TLS (mutual with a CA) when on. FAILED_PRECONDITION
  // when on without a certificate (a kClient config).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials()
      const;
  // Insecure when off; TLS with the CA as roots (default roots without one)
  // and the certificate and key as the client identity when given.
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

  // One line for the log: "TLS off: ..." or what is on, with the paths
  // and the reload interval.
  std::string Describe() const;

  // The mirror behind the credentials (null when TLS is off): for tests
  // that reload at once instead of waiting for the interval.
  CertificateMirror* mirror() const { return mirror_.get(); }

 private:
  bool enabled_ = false;
  TlsRole role_ = TlsRole::kServer;
  TlsPaths paths_;
  absl::Duration interval_;
  std::shared_ptr<CertificateMirror> mirror_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_TLS_CONFIG_H_
