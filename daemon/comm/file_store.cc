#include "daemon/comm/file_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {
namespace {

// Keys may hold any bytes ("epoch/3/world/0"); file names may not hold '/'
// or NUL, and "." / ".." are special. Every byte outside [A-Za-z0-9_.-] is
// written as %XX, and a leading '.' too, which makes the mapping injective
// and never collides with the temporary files (which start with '.').
std::string EscapeKey(absl::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size() + 8);
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                       (c == '.' && i > 0);
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  if (out.empty()) out.push_back('%');  // The empty key.
  return out;
}

absl::Status ErrnoStatus(absl::string_view what, absl::string_view path,
                         int error) {
  return absl::UnavailableError(
      absl::StrCat("file store: ", what, " ", path, ": ", strerror(error)));
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  while (directory_.size() > 1 && directory_.back() == '/') {
    directory_.pop_back();
  }
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  static std::atomic<uint64_t> sequence{0};
  const std::string path = absl::StrCat(directory_, "/", EscapeKey(key));
  // A temporary name unique to this process and call, in the same
  // directory so that rename(2) is atomic.
  const std::string tmp =
      absl::StrCat(directory_, "/.tmp.", ::getpid(), ".",
                   sequence.fetch_add(1, std::memory_order_relaxed));
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", tmp, errno);
  absl::Status status = WriteAll(fd, value, tmp);
  if (::close(fd) != 0 && status.ok())
    status = ErrnoStatus("close", tmp, errno);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus("rename", path, errno);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key) {
  const std::string path = absl::StrCat(directory_, "/", EscapeKey(key));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("store key '", key, "' is not set"));
    }
    return ErrnoStatus("open", path, errno);
  }
  std::string value;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return ErrnoStatus("read", path, error);
    }
    if (n == 0) break;
    value.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return value;
}

absl::Status FileStore::Wait(const std::vector<std::string>& keys,
                             absl::Duration timeout) {
  const MonoTime deadline = MonoNow() + timeout;
  // Polls the file system with a backoff from 1 ms to 50 ms: rendezvous
  // takes milliseconds to seconds, so this costs little and needs no
  // inotify.
  absl::Duration backoff = absl::Milliseconds(1);
  size_t next = 0;  // Keys before `next` are known to exist.
  for (;;) {
    while (next < keys.size()) {
      const std::string path =
          absl::StrCat(directory_, "/", EscapeKey(keys[next]));
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) break;
      ++next;
    }
    if (next == keys.size()) return absl::OkStatus();
    const MonoTime now = MonoNow();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("store key '", keys[next], "' was not set within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, absl::Milliseconds(50));
  }
}

}  // namespace shardd::comm
