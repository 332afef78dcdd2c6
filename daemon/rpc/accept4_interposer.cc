// The process's accept4, in front of libc's: gRPC's listeners call it
// through the dynamic linker, which finds a definition in the executable
// before libc's. It makes the system call itself, and turns a descriptor or
// memory shortage on a non-blocking listener into EAGAIN plus a scheduled
// retry (AcceptRetry explains why gRPC 1.51 needs that), and tells
// AcceptRetry of accepts and empty queues, which end a shortage. Every other
// result is returned unchanged, errno included.

#include "daemon/rpc/accept4_interposer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "daemon/rpc/accept_retry.h"

extern "C" int accept4(int fd, sockaddr* __restrict address,
                       socklen_t* __restrict length, int flags) {
  const long result = syscall(SYS_accept4, fd, address, length, flags);
  if (result >= 0) {
    shardd::rpc::AcceptRetry::Process().Accepted(fd);
    return static_cast<int>(result);
  }
  const int error = errno;
  if (error == EAGAIN || error == EWOULDBLOCK) {
    shardd::rpc::AcceptRetry::Process().Drained(fd);
    errno = error;
    return -1;
  }
  const int status_flags = fcntl(fd, F_GETFL);
  const bool nonblocking = status_flags != -1 && (status_flags & O_NONBLOCK);
  if (shardd::rpc::AcceptRetry::ShouldDefer(error, nonblocking)) {
    shardd::rpc::AcceptRetry::Process().Deferred(fd, error);
    errno = EAGAIN;
    return -1;
  }
  errno = error;
  return -1;
}

namespace shardd::rpc {

bool AcceptInterposerInstalled() {
  // What a library's call of accept4 binds to: the first definition in the
  // global scope, the executable's when it exports one.
  void* bound = dlsym(RTLD_DEFAULT, "accept4");
  return bound == reinterpret_cast<void*>(&::accept4);
}

void PrepareAcceptRetry(absl::string_view program) {
  AcceptRetry::Process();
  if (AcceptInterposerInstalled()) return;
  std::fprintf(stderr,
               "%s: warning: accept4 is libc's, not accept4_interposer's: "
               "a listener that meets a descriptor shortage stops "
               "accepting for good (gRPC 1.51)\n",
               std::string(program).c_str());
}

}  // namespace shardd::rpc
