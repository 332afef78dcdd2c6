#ifndef SHARDD_DAEMON_RPC_TLS_PEM_H_
#define SHARDD_DAEMON_RPC_TLS_PEM_H_

// Reading and checking the PEM files of TLS (--tls_cert, --tls_key,
// --tls_ca): at start (TlsConfig::Load) and at every reload
// (CertificateMirror), so that what gRPC is handed is always a set it can
// use. Stateless functions; thread-safe.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

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

// The contents of the files of a TlsPaths; empty where no path was given.
struct TlsPem {
  std::string cert;
  std::string key;
  std::string ca;

  friend bool operator==(const TlsPem& a, const TlsPem& b) {
    return a.cert == b.cert && a.key == b.key && a.ca == b.ca;
  }
  friend bool operator!=(const TlsPem& a, const TlsPem& b) { return !(a == b); }
};

// Reads `path` (the value of --`flag`) whole, checking that it holds a PEM
// block whose label contains `label` ("CERTIFICATE", "PRIVATE KEY"). Errors
// name the flag and the path: NOT_FOUND for a file that does not exist,
// PERMISSION_DENIED for one that cannot be read, INVALID_ARGUMENT for a
// directory, an empty or oversized (over 1 MiB) file, or one without the
// block.
absl::StatusOr<std::string> ReadPemFile(absl::string_view flag,
                                        const std::string& path,
                                        absl::string_view label);

// Checks that `pem` is usable: every CERTIFICATE block of the certificate
// chain and of the CA parses, the key parses, and the key is the private
// key of the chain's first certificate. INVALID_ARGUMENT naming the flag(s)
// and path(s) of `paths` otherwise.
absl::Status CheckTlsPem(const TlsPaths& paths, const TlsPem& pem);

// ReadPemFile of every path given, then CheckTlsPem.
absl::StatusOr<TlsPem> ReadTlsPem(const TlsPaths& paths);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_TLS_PEM_H_
