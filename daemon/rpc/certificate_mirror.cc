#include "daemon/rpc/certificate_mirror.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_time.h"

namespace shardd::rpc {
namespace {

// The identity file: the key, then the certificate chain.
std::string Identity(const TlsPem& pem) {
  std::string out = pem.key;
  if (!out.empty() && out.back() != '\n') out.push_back('\n');
  out.append(pem.cert);
  return out;
}

absl::Status WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "write to a TLS memfd");
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

CertificateMirror::CertificateMirror(std::string who, TlsPaths sources,
                                     absl::Duration interval)
    : who_(std::move(who)), sources_(std::move(sources)), interval_(interval) {}

absl::StatusOr<std::unique_ptr<CertificateMirror>> CertificateMirror::Start(
    const std::string& who, const TlsPaths& sources, const TlsPem& initial,
    absl::Duration interval) {
  std::unique_ptr<CertificateMirror> mirror(
      new CertificateMirror(who, sources, interval));
  {
    absl::MutexLock lock(&mirror->mu_);
    if (!initial.cert.empty()) {
      absl::Status s = mirror->Publish(Identity(initial), &mirror->identity_fd_,
                                       &mirror->identity_mtime_);
      if (!s.ok()) return s;
      mirror->identity_path_ =
          absl::StrCat("/proc/self/fd/", mirror->identity_fd_);
    }
    if (!initial.ca.empty()) {
      absl::Status s =
          mirror->Publish(initial.ca, &mirror->ca_fd_, &mirror->ca_mtime_);
      if (!s.ok()) return s;
      mirror->ca_path_ = absl::StrCat("/proc/self/fd/", mirror->ca_fd_);
    }
    mirror->published_ = initial;
    mirror->generation_ = 1;
  }
  // gRPC reads the copies by name: fail now, not at every handshake, where
  // /proc is not mounted.
  for (const std::string& path : {mirror->identity_path_, mirror->ca_path_}) {
    if (path.empty()) continue;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot open ", path,
                              ", the copy of the TLS files that gRPC reads "
                              "(is /proc mounted?)"));
    }
    close(fd);
  }
  mirror->thread_ = std::thread([m = mirror.get()] { m->Run(); });
  return mirror;
}

CertificateMirror::~CertificateMirror() {
  {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  // The memfds stay open on purpose (see the class comment).
}

void CertificateMirror::Run() {
  while (true) {
    {
      absl::MutexLock lock(&stop_mu_);
      if (AwaitUntil(&stop_mu_, absl::Condition(&stop_),
                     MonoNow() + interval_)) {
        return;
      }
    }
    Refresh().IgnoreError();  // Refresh logs a refusal itself.
  }
}

absl::Status CertificateMirror::Refresh() {
  absl::StatusOr<TlsPem> pem = ReadTlsPem(sources_);
  absl::MutexLock lock(&mu_);
  if (!pem.ok()) {
    const std::string error = pem.status().ToString();
    if (error != last_error_) {
      std::fprintf(stderr,
                   "%s: TLS files not reloaded, the last good certificate "
                   "stays in use: %s\n",
                   who_.c_str(), error.c_str());
      last_error_ = error;
    }
    return pem.status();
  }
  last_error_.clear();
  if (*pem == published_) return absl::OkStatus();
  if (pem->cert != published_.cert || pem->key != published_.key) {
    absl::Status s = Publish(Identity(*pem), &identity_fd_, &identity_mtime_);
    if (!s.ok()) return s;
  }
  if (pem->ca != published_.ca) {
    absl::Status s = Publish(pem->ca, &ca_fd_, &ca_mtime_);
    if (!s.ok()) return s;
  }
  published_ = *std::move(pem);
  ++generation_;
  std::string files;
  if (!sources_.cert.empty()) {
    absl::StrAppend(&files, " --tls_cert=", sources_.cert,
                    " --tls_key=", sources_.key);
  }
  if (!sources_.ca.empty()) absl::StrAppend(&files, " --tls_ca=", sources_.ca);
  std::fprintf(stderr, "%s: TLS files reloaded (set %lld):%s\n", who_.c_str(),
               static_cast<long long>(generation_), files.c_str());
  return absl::OkStatus();
}

int64_t CertificateMirror::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

absl::Status CertificateMirror::Publish(const std::string& text, int* fd,
                                        int64_t* mtime) {
  const int fresh = memfd_create("shardd-tls", MFD_CLOEXEC);
  if (fresh < 0) return absl::ErrnoToStatus(errno, "memfd_create");
  absl::Cleanup close_fresh = [fresh] { close(fresh); };
  if (fchmod(fresh, 0600) != 0) {
    return absl::ErrnoToStatus(errno, "fchmod of a TLS memfd");
  }
  absl::Status s = WriteAll(fresh, text);
  if (!s.ok()) return s;
  // Later than the previous copy's, in whole seconds (what gRPC compares).
  const int64_t seconds =
      std::max(absl::ToUnixSeconds(absl::Now()), *mtime + 1);
  const struct timespec times[2] = {{static_cast<time_t>(seconds), 0},
                                    {static_cast<time_t>(seconds), 0}};
  if (futimens(fresh, times) != 0) {
    return absl::ErrnoToStatus(errno, "futimens of a TLS memfd");
  }
  if (*fd < 0) {
    std::move(close_fresh).Cancel();
    *fd = fresh;
  } else if (dup3(fresh, *fd, O_CLOEXEC) < 0) {
    return absl::ErrnoToStatus(errno, "dup3 of a TLS memfd");
  }
  *mtime = seconds;
  return absl::OkStatus();
}

}  // namespace shardd::rpc
