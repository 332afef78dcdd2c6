#include "daemon/memory/shm_owner_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::memory {
namespace {

absl::Status Errno(int err, absl::string_view call, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(call, " ", path));
}

}  // namespace

std::string ShmOwnerLock::FileName(absl::string_view prefix) {
  return absl::StrCat(prefix, ".owner");
}

namespace {

// Takes the lock of an owner file without waiting: OK, ALREADY_EXISTS when
// a live process holds it, the errno's code otherwise.
absl::Status TryLock(int fd, const std::string& path,
                     absl::string_view prefix) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return absl::OkStatus();
  if (errno == EWOULDBLOCK) {
    return absl::AlreadyExistsError(
        absl::StrCat(path,
                     " is held by a live process: another daemon uses "
                     "the prefix ",
                     prefix, " in this directory"));
  }
  return Errno(errno, "flock", path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmOwnerLock>> ShmOwnerLock::Acquire(
    absl::string_view dir, absl::string_view prefix) {
  const std::string path = absl::StrCat(dir, "/", FileName(prefix));
  const std::string directory(dir);
  int fd = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // A file system without O_TMPFILE (overlayfs before Linux 6.6): the
    // file is named at once and locked right after. A sweeper that opens
    // it in between takes this daemon for dead and removes the owner file
    // (no segment exists yet); the segments then have no owner file and
    // are kept as unknown while this process lives, never removed. A name
    // already there is a live holder's (its lock holds) or a dead one's
    // (then the lock is ours).
    fd = ::open(path.c_str(),
                O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) return Errno(errno, "open", path);
    if (absl::Status locked = TryLock(fd, path, prefix); !locked.ok()) {
      ::close(fd);
      return locked;
    }
    return std::unique_ptr<ShmOwnerLock>(new ShmOwnerLock(path, fd));
  }
  if (fd < 0) return Errno(errno, "open(O_TMPFILE)", directory);
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  if (absl::Status locked = TryLock(fd, path, prefix); !locked.ok()) {
    return locked;
  }
  const std::string self = absl::StrCat("/proc/self/fd/", fd);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(),
                 AT_SYMLINK_FOLLOW) == 0) {
      std::move(close_fd).Cancel();
      return std::unique_ptr<ShmOwnerLock>(new ShmOwnerLock(path, fd));
    }
    if (errno != EEXIST) return Errno(errno, "linkat", path);
    // The name is taken: by a live process (its lock holds), or left by a
    // dead one with the same prefix (then it is ours to replace).
    const int other = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (other < 0) {
      if (errno == ENOENT) continue;
      return Errno(errno, "open", path);
    }
    absl::Cleanup close_other = [other] { ::close(other); };
    if (absl::Status locked = TryLock(other, path, prefix); !locked.ok()) {
      return locked;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Errno(errno, "unlink", path);
    }
  }
  return absl::AlreadyExistsError(
      absl::StrCat(path, ": taken again while it was being replaced"));
}

ShmOwnerLock::~ShmOwnerLock() {
  // Unlinked while still locked: a sweeper never finds it unlocked.
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace shardd::memory
