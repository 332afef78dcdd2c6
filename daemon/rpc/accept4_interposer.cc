// The process's accept4 and accept, in front of libc's: gRPC's listeners
// call accept4, civetweb's (the /metrics endpoint) and Gloo's accept, through
// the dynamic linker, which finds a definition in the executable before
// libc's. Each makes the system call itself.
// - accept4 turns a descriptor or memory shortage on a non-blocking listener
//   into EAGAIN plus a scheduled retry (AcceptRetry explains why gRPC 1.51
//   needs that), and tells AcceptRetry of accepts and empty queues, which
//   end a shortage.
// - Both pause after a shortage on a listener registered with AcceptPacer
//   (the metrics endpoint's), which would otherwise retry in a busy loop.
// Every other result is returned unchanged, errno included.

#include "daemon/rpc/accept4_interposer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "daemon/rpc/accept_pacer.h"
#include "daemon/rpc/accept_retry.h"

extern "C" int accept4(int fd, sockaddr* __restrict address,
                       socklen_t* __restrict length, int flags) {
  const long result = syscall(SYS_accept4, fd, address, length, flags);
  if (result >= 0) {
    shardd::rpc::AcceptRetry::Process().Accepted(fd);
    shardd::rpc::AcceptPacer::Process().Accepted(fd);
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
  shardd::rpc::AcceptPacer::Process().Failed(fd, error);
  errno = error;
  return -1;
}

// accept(2) is accept4(2) without flags on Linux.
extern "C" int accept(int fd, sockaddr* __restrict address,
                      socklen_t* __restrict length) {
  const long result = syscall(SYS_accept4, fd, address, length, 0);
  if (result >= 0) {
    shardd::rpc::AcceptPacer::Process().Accepted(fd);
    return static_cast<int>(result);
  }
  const int error = errno;
  shardd::rpc::AcceptPacer::Process().Failed(fd, error);
  errno = error;
  return -1;
}

namespace shardd::rpc {

bool AcceptInterposerInstalled() {
  // What a library's call binds to: the first definition in the global
  // scope, the executable's when it exports one.
  return dlsym(RTLD_DEFAULT, "accept4") ==
             reinterpret_cast<void*>(&::accept4) &&
         dlsym(RTLD_DEFAULT, "accept") == reinterpret_cast<void*>(&::accept);
}

void PrepareAcceptRetry(absl::string_view program) {
  AcceptRetry::Process();
  if (AcceptInterposerInstalled()) return;
  std::fprintf(stderr,
               "%s: warning: accept4 or accept is libc's, not "
               "accept4_interposer's: a gRPC listener that meets a descriptor "
               "shortage stops accepting for good (gRPC 1.51), and the "
               "metrics endpoint spins meanwhile\n",
               std::string(program).c_str());
}

}  // namespace shardd::rpc
