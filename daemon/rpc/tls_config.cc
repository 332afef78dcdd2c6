#include "daemon/rpc/tls_config.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace shardd::rpc {
namespace {

// How often gRPC's provider looks at the mirror's copies. They are memfds
// of this process, so reading them every second costs nothing, and a
// rotation reaches new connections at most a second after the mirror took
// it.
constexpr unsigned int kProviderPollSeconds = 1;

}  // namespace

absl::StatusOr<TlsConfig> TlsConfig::Load(const TlsPaths& paths, TlsRole role,
                                          const TlsReloadOptions& reload) {
  TlsConfig config;
  config.role_ = role;
  config.paths_ = paths;
  config.interval_ = reload.interval;
  if (paths.cert.empty() && paths.key.empty() && paths.ca.empty()) {
    return config;  // TLS off.
  }
  if (role == TlsRole::kServer && paths.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert: required once --tls_key or --tls_ca is given (a TLS "
        "server needs its own certificate)");
  }
  if (paths.cert.empty() != paths.key.empty()) {
    return absl::InvalidArgumentError(
        paths.key.empty() ? "--tls_key: required with --tls_cert (the "
                            "certificate's private key)"
                          : "--tls_cert: required with --tls_key (the "
                            "key's certificate)");
  }
  if (reload.interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_refresh_interval=", absl::FormatDuration(reload.interval),
        ": must be at least 1s"));
  }
  absl::StatusOr<TlsPem> pem = ReadTlsPem(paths);
  if (!pem.ok()) return pem.status();
  absl::StatusOr<std::unique_ptr<CertificateMirror>> mirror =
      CertificateMirror::Start(reload.who, paths, *pem, reload.interval);
  if (!mirror.ok()) return mirror.status();
  config.mirror_ = *std::move(mirror);
  const std::string& identity = config.mirror_->identity_path();
  config.provider_ =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          identity, identity, config.mirror_->ca_path(), kProviderPollSeconds);
  config.enabled_ = true;
  return config;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
TlsConfig::ServerCredentials() const {
  if (!enabled_) return grpc::InsecureServerCredentials();
  if (paths_.cert.empty()) {
    return absl::FailedPreconditionError(
        "TLS server credentials need --tls_cert and --tls_key");
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider_);
  options.watch_identity_key_cert_pairs();
  if (paths_.ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsConfig::ChannelCredentials()
    const {
  if (!enabled_) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider_);
  // Without --tls_ca no roots are watched, and gRPC's default roots apply.
  if (!paths_.ca.empty()) options.watch_root_certs();
  if (!paths_.cert.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

std::string TlsConfig::Describe() const {
  if (!enabled_) {
    return "TLS off (no --tls_cert/--tls_key/--tls_ca): gRPC over TCP is "
           "plaintext and unauthenticated";
  }
  std::string out = "TLS on";
  if (!paths_.cert.empty()) {
    absl::StrAppend(&out, " (cert ", paths_.cert, ", key ", paths_.key, ")");
  }
  if (role_ == TlsRole::kServer) {
    absl::StrAppend(&out, paths_.ca.empty()
                              ? "; no --tls_ca: clients are not asked for a "
                                "certificate"
                              : absl::StrCat("; mutual TLS: clients must "
                                             "present a certificate signed by ",
                                             paths_.ca));
  } else if (!paths_.cert.empty()) {
    absl::StrAppend(&out, "; mutual TLS: the client certificate is presented");
  }
  absl::StrAppend(&out, "; servers are verified against ",
                  paths_.ca.empty() ? "the default roots" : paths_.ca,
                  "; the files are read again every ",
                  absl::FormatDuration(interval_),
                  " (--tls_refresh_interval), a new certificate is used "
                  "without a restart");
  return out;
}

}  // namespace shardd::rpc
