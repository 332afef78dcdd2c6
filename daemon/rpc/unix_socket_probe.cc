#include "daemon/rpc/unix_socket_probe.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace shardd::rpc {

absl::Status CheckUnixSocketIsFree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return absl::OkStatus();
    const std::string why = absl::StrCat(path, ": ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(why)
                         : absl::FailedPreconditionError(why);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket"));
  }
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": longer than a Unix socket path may be (",
                     sizeof(addr.sun_path) - 1, " bytes)"));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("socket(AF_UNIX): ", std::strerror(errno)));
  }
  const int rc =
      connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 ? 0 : errno;
  close(fd);
  // A Unix stream connect completes at once or fails at once; EAGAIN means
  // a listener whose backlog is full: served, and busy.
  if (err == 0 || err == EAGAIN || err == EINPROGRESS) {
    return absl::UnavailableError(
        absl::StrCat(path,
                     " is served by a running process (another shardd with the "
                     "same socket?); stop it or choose another path"));
  }
  // Refused: stale. Gone: unlinked since the lstat (its daemon's exit).
  if (err == ECONNREFUSED || err == ENOENT) return absl::OkStatus();
  const std::string why =
      absl::StrCat("connect ", path, ": ", std::strerror(err));
  return err == EACCES ? absl::PermissionDeniedError(why)
                       : absl::FailedPreconditionError(why);
}

}  // namespace shardd::rpc
