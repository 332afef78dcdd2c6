#include "daemon/rpc/tls_config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace shardd::rpc {
namespace {

// A PEM certificate chain or key is a few KiB; anything this large is not
// one (and is not read into memory).
constexpr off_t kMaxPemBytes = 1 << 20;

// Reads `path` (the value of --`flag`) whole, checking that it holds a PEM
// block whose label contains `label` ("CERTIFICATE", "PRIVATE KEY").
absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path,
                                    absl::string_view label) {
  const std::string what = absl::StrCat("--", flag, "=", path);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat(what, ": cannot open: ", std::strerror(error));
    if (error == ENOENT || error == ENOTDIR) {
      return absl::NotFoundError(message);
    }
    if (error == EACCES || error == EPERM) {
      return absl::PermissionDeniedError(message);
    }
    return absl::InvalidArgumentError(message);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a regular file"));
  }
  if (st.st_size > kMaxPemBytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", st.st_size, " bytes, more than a PEM file holds (limit ",
        kMaxPemBytes, ")"));
  }
  std::string data;
  char buffer[8192];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot read: ", std::strerror(error)));
    }
    if (n == 0) break;
    data.append(buffer, static_cast<size_t>(n));
    if (static_cast<off_t>(data.size()) > kMaxPemBytes) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": more than ", kMaxPemBytes, " bytes"));
    }
  }
  close(fd);
  if (data.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty file"));
  }
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN PRIVATE KEY-----",
  // "-----BEGIN EC PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----".
  size_t at = 0;
  while ((at = data.find("-----BEGIN ", at)) != std::string::npos) {
    at += 11;
    const size_t end = data.find("-----", at);
    if (end == std::string::npos) break;
    if (absl::StrContains(absl::string_view(data).substr(at, end - at),
                          label)) {
      return data;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": no PEM block \"-----BEGIN ...", label, "-----\" in the file"));
}

}  // namespace

absl::StatusOr<TlsConfig> TlsConfig::Load(const TlsPaths& paths, TlsRole role) {
  TlsConfig config;
  config.role_ = role;
  config.paths_ = paths;
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
  if (!paths.cert.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem("tls_cert", paths.cert, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem("tls_key", paths.key, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    config.cert_pem_ = *std::move(cert);
    config.key_pem_ = *std::move(key);
  }
  if (!paths.ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("tls_ca", paths.ca, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    config.ca_pem_ = *std::move(ca);
  }
  config.enabled_ = true;
  return config;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
TlsConfig::ServerCredentials() const {
  if (!enabled_) return grpc::InsecureServerCredentials();
  if (cert_pem_.empty()) {
    return absl::FailedPreconditionError(
        "TLS server credentials need --tls_cert and --tls_key");
  }
  grpc::SslServerCredentialsOptions options(
      ca_pem_.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> TlsConfig::ChannelCredentials()
    const {
  if (!enabled_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem_;  // Empty: gRPC's default roots.
  options.pem_private_key = key_pem_;
  options.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(options);
}

std::string TlsConfig::Describe() const {
  if (!enabled_) {
    return "TLS off (no --tls_cert/--tls_key/--tls_ca): gRPC over TCP is "
           "plaintext and unauthenticated";
  }
  std::string out = "TLS on";
  if (!cert_pem_.empty()) {
    absl::StrAppend(&out, " (cert ", paths_.cert, ", key ", paths_.key, ")");
  }
  if (role_ == TlsRole::kServer) {
    absl::StrAppend(&out, ca_pem_.empty()
                              ? "; no --tls_ca: clients are not asked for a "
                                "certificate"
                              : absl::StrCat("; mutual TLS: clients must "
                                             "present a certificate signed by ",
                                             paths_.ca));
  } else if (!cert_pem_.empty()) {
    absl::StrAppend(&out, "; mutual TLS: the client certificate is presented");
  }
  absl::StrAppend(&out, "; servers are verified against ",
                  ca_pem_.empty() ? "the default roots" : paths_.ca);
  return out;
}

}  // namespace shardd::rpc
