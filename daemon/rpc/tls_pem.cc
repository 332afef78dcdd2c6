#include "daemon/rpc/tls_pem.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardd::rpc {
namespace {

// A PEM certificate chain or key is a few KiB; anything this large is not
// one (and is not read into memory).
constexpr off_t kMaxPemBytes = 1 << 20;

// OpenSSL's default password callback prompts on the terminal; a daemon
// has none, so an encrypted key simply does not parse.
int NoPassword(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) {
  return 0;
}

// Whether the last failed PEM read stopped only because no block was left.
bool OnlyEndOfInput() {
  const unsigned long error = ERR_peek_last_error();
  return ERR_GET_LIB(error) == ERR_LIB_PEM &&
         ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
}

// Parses every certificate of `pem`. The first one, owned by the caller
// (null when there is none), or an error saying what failed.
absl::StatusOr<X509*> ParseCertificates(const std::string& pem) {
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return absl::ResourceExhaustedError("BIO_new_mem_buf");
  absl::Cleanup free_bio = [bio] { BIO_free(bio); };
  X509* first = nullptr;
  int count = 0;
  while (true) {
    X509* cert = PEM_read_bio_X509(bio, nullptr, NoPassword, nullptr);
    if (cert == nullptr) break;
    ++count;
    if (first == nullptr) {
      first = cert;
    } else {
      X509_free(cert);
    }
  }
  const bool clean = OnlyEndOfInput();
  ERR_clear_error();
  if (!clean || count == 0) {
    if (first != nullptr) X509_free(first);
    return absl::InvalidArgumentError(
        count == 0 ? "no certificate in it parses"
                   : absl::StrCat("certificate ", count + 1,
                                  " of the file does not parse"));
  }
  return first;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view flag,
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
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a regular file"));
  }
  if (st.st_size > kMaxPemBytes) {
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
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot read: ", std::strerror(errno)));
    }
    if (n == 0) break;
    data.append(buffer, static_cast<size_t>(n));
    if (static_cast<off_t>(data.size()) > kMaxPemBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": more than ", kMaxPemBytes, " bytes"));
    }
  }
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

absl::Status CheckTlsPem(const TlsPaths& paths, const TlsPem& pem) {
  if (!pem.ca.empty()) {
    absl::StatusOr<X509*> ca = ParseCertificates(pem.ca);
    if (!ca.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_ca=", paths.ca, ": ", ca.status().message()));
    }
    X509_free(*ca);
  }
  if (pem.cert.empty() && pem.key.empty()) return absl::OkStatus();
  absl::StatusOr<X509*> leaf = ParseCertificates(pem.cert);
  if (!leaf.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert=", paths.cert, ": ", leaf.status().message()));
  }
  absl::Cleanup free_leaf = [cert = *leaf] { X509_free(cert); };
  ERR_clear_error();
  BIO* bio = BIO_new_mem_buf(pem.key.data(), static_cast<int>(pem.key.size()));
  if (bio == nullptr) return absl::ResourceExhaustedError("BIO_new_mem_buf");
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, NoPassword, nullptr);
  BIO_free(bio);
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key=", paths.key,
                     ": the private key does not parse (or is encrypted)"));
  }
  const bool match = X509_check_private_key(*leaf, key) == 1;
  EVP_PKEY_free(key);
  ERR_clear_error();
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key=", paths.key, " does not belong to --tls_cert=", paths.cert,
        " (the certificate holds another public key; a certificate and key "
        "from different pairs, or a rotation half written)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsPem> ReadTlsPem(const TlsPaths& paths) {
  TlsPem pem;
  if (!paths.cert.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPemFile("tls_cert", paths.cert, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    pem.cert = *std::move(cert);
  }
  if (!paths.key.empty()) {
    absl::StatusOr<std::string> key =
        ReadPemFile("tls_key", paths.key, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    pem.key = *std::move(key);
  }
  if (!paths.ca.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemFile("tls_ca", paths.ca, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    pem.ca = *std::move(ca);
  }
  absl::Status s = CheckTlsPem(paths, pem);
  if (!s.ok()) return s;
  return pem;
}

}  // namespace shardd::rpc
