#ifndef SHARDD_DAEMON_RPC_CERTIFICATE_MIRROR_H_
#define SHARDD_DAEMON_RPC_CERTIFICATE_MIRROR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/rpc/tls_pem.h"

namespace shardd::rpc {

// Keeps a checked copy of the TLS files (--tls_cert, --tls_key, --tls_ca)
// for gRPC's FileWatcherCertificateProvider to watch instead of the files
// themselves, so that certificates can be rotated without a restart and a
// rotation caught half-way never reaches gRPC.
//
// Why not let gRPC watch the files directly: gRPC 1.51's provider hands
// whatever it reads to the TLS stack, and a key that does not match its
// certificate (a rotation that wrote the key first, a truncated file)
// makes the server drop its handshaker: every new connection is refused
// until the next good read. Here every read set is checked first
// (CheckTlsPem: both parse, the key is the certificate's); a bad set is
// reported once and skipped, and the last good set stays.
//
// The copies are memfds, named /proc/self/fd/N: no writable directory is
// needed (the pods run with a read-only root filesystem) and no copy of the
// private key is left on disk. The identity file holds the key and the
// certificate chain together (OpenSSL skips the other blocks when it reads
// either), so a new pair replaces both at once (dup3 over the same
// descriptor number). Each new copy gets a modification time (whole
// seconds) later than the one before it: gRPC compares the times before and
// after its two reads of the identity and reads again when they differ, so
// a swap between its reads cannot give it a key and a certificate from
// different sets.
//
// The descriptors are never closed, not even by the destructor: gRPC
// credentials may outlive this object, and a closed number could be reused
// by another file (a socket, a pipe, a shared-memory segment) that gRPC
// would then read. That is two descriptors per mirror, a mirror per
// process in practice.
//
// Thread-safety: Refresh and the accessors may be called from any thread;
// a thread of its own calls Refresh every `interval` until destruction.
class CertificateMirror {
 public:
  // Publishes `initial` (the contents of `sources`, already checked by
  // ReadTlsPem) and starts polling `sources` every `interval`. `who`
  // prefixes its log lines ("shardd", "coordinator"). INTERNAL when a memfd
  // cannot be created or written.
  static absl::StatusOr<std::unique_ptr<CertificateMirror>> Start(
      const std::string& who, const TlsPaths& sources, const TlsPem& initial,
      absl::Duration interval);

  ~CertificateMirror();
  CertificateMirror(const CertificateMirror&) = delete;
  CertificateMirror& operator=(const CertificateMirror&) = delete;

  // The key and certificate chain in one file, for both the key and the
  // certificate path of the provider; empty without --tls_cert.
  const std::string& identity_path() const { return identity_path_; }
  // The CA file; empty without --tls_ca.
  const std::string& ca_path() const { return ca_path_; }

  // Reads and checks the source files once and publishes them if they
  // differ from what is published. OK when published or unchanged; else
  // the reason (ReadTlsPem's error), and the published set stays.
  absl::Status Refresh();

  // How many sets have been published (1 after Start).
  int64_t generation() const;

 private:
  CertificateMirror(std::string who, TlsPaths sources, absl::Duration interval);
  void Run();
  // Writes `text` into a new memfd and moves it onto `*fd` (the first time:
  // keeps it there), with a modification time later than `*mtime`.
  absl::Status Publish(const std::string& text, int* fd, int64_t* mtime)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string who_;
  const TlsPaths sources_;
  const absl::Duration interval_;
  std::string identity_path_;
  std::string ca_path_;

  mutable absl::Mutex mu_;
  TlsPem published_ ABSL_GUARDED_BY(mu_);
  int identity_fd_ ABSL_GUARDED_BY(mu_) = -1;
  int ca_fd_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t identity_mtime_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ca_mtime_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The last refusal logged, so that a bad set is reported once, not at
  // every poll.
  std::string last_error_ ABSL_GUARDED_BY(mu_);

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_CERTIFICATE_MIRROR_H_
