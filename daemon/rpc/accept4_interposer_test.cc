#include "daemon/rpc/accept4_interposer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/accept_pacer.h"
#include "daemon/rpc/accept_retry.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

// Listens on 127.0.0.1 (non-blocking unless told) and returns the fd.
int Listen(sockaddr_in* address, bool nonblocking = true) {
  const int fd =
      socket(AF_INET,
             SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  *address = {};
  address->sin_family = AF_INET;
  address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(*address);
  if (bind(fd, reinterpret_cast<sockaddr*>(address), length) != 0 ||
      listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(address), &length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int Connect(const sockaddr_in& address) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address),
              sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Lowers the soft open-file limit to the lowest free descriptor (every new
// descriptor then fails with EMFILE) and restores it when destroyed.
class FullDescriptorTable {
 public:
  FullDescriptorTable() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    const int lowest_free = dup(0);
    close(lowest_free);
    rlimit full = saved_;
    full.rlim_cur = static_cast<rlim_t>(lowest_free);
    ok_ = lowest_free >= 0 && setrlimit(RLIMIT_NOFILE, &full) == 0;
  }
  ~FullDescriptorTable() { Restore(); }
  void Restore() {
    if (ok_) setrlimit(RLIMIT_NOFILE, &saved_);
    ok_ = false;
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

class Accept4InterposerTest : public ::testing::Test {};

TEST_F(Accept4InterposerTest, IsTheAccept4ThisBinaryUses) {
  EXPECT_TRUE(AcceptInterposerInstalled());
}

// The way gRPC's poller meets it: an edge-triggered epoll on a non-blocking
// listener. A full table makes accept4 say EAGAIN (libc's says EMFILE, and
// gRPC 1.51 would close the listener); once descriptors are free, the
// retry's kick brings a new edge, and both connections are accepted.
TEST_F(Accept4InterposerTest, FullTableLooksLikeNothingToAcceptUntilItEnds) {
  sockaddr_in address{};
  const int listener = Listen(&address);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  absl::Cleanup close_listener = [listener] { close(listener); };
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll, 0);
  absl::Cleanup close_epoll = [epoll] { close(epoll); };
  epoll_event interest{};
  interest.events = EPOLLIN | EPOLLET;
  ASSERT_EQ(epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &interest), 0);
  const int client = Connect(address);
  ASSERT_GE(client, 0) << std::strerror(errno);
  absl::Cleanup close_client = [client] { close(client); };
  epoll_event event{};
  ASSERT_EQ(epoll_wait(epoll, &event, 1, 10000), 1);

  const AcceptRetry::Counts before = AcceptRetry::Process().counts();
  FullDescriptorTable full;
  ASSERT_TRUE(full.ok());
  errno = 0;
  EXPECT_EQ(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC), -1);
  EXPECT_EQ(errno, EAGAIN);
  full.Restore();
  EXPECT_EQ(AcceptRetry::Process().counts().deferred, before.deferred + 1);
  EXPECT_EQ(AcceptRetry::Process().counts().episodes, before.episodes + 1);

  // The edge was consumed; only the kick brings the next one.
  ASSERT_EQ(epoll_wait(epoll, &event, 1, 10000), 1);
  int accepted = 0;
  while (true) {
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      EXPECT_EQ(errno, EAGAIN);
      break;
    }
    close(fd);
    ++accepted;
  }
  EXPECT_EQ(accepted, 2);  // The waiting client, and the kick.
  EXPECT_EQ(AcceptRetry::Process().counts().recovered, before.recovered + 1);
  // The kicker counts its kick once connect returned, which may be after
  // the accept.
  const MonoTime deadline = MonoNow() + absl::Seconds(10);
  while (AcceptRetry::Process().counts().kicks == before.kicks &&
         MonoNow() < deadline) {
    epoll_wait(epoll, &event, 1, 2);
  }
  EXPECT_EQ(AcceptRetry::Process().counts().kicks, before.kicks + 1);
}

TEST_F(Accept4InterposerTest, BlockingListenerStillSeesEmfile) {
  sockaddr_in address{};
  const int listener = Listen(&address, /*nonblocking=*/false);
  ASSERT_GE(listener, 0);
  absl::Cleanup close_listener = [listener] { close(listener); };
  const int client = Connect(address);
  ASSERT_GE(client, 0);
  absl::Cleanup close_client = [client] { close(client); };
  const AcceptRetry::Counts before = AcceptRetry::Process().counts();
  FullDescriptorTable full;
  ASSERT_TRUE(full.ok());
  errno = 0;
  EXPECT_EQ(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC), -1);
  EXPECT_EQ(errno, EMFILE);
  full.Restore();
  EXPECT_EQ(AcceptRetry::Process().counts().deferred, before.deferred);
}

// The way civetweb meets it: poll says the blocking listener is readable,
// accept fails for want of a descriptor and the connection stays queued.
// On the listener registered with AcceptPacer (the metrics endpoint's) the
// failure comes back after a pause, so that the poll loop does not spin;
// once descriptors are free the waiting connection is accepted.
TEST_F(Accept4InterposerTest, AcceptPausesInAShortageOnARegisteredListener) {
  sockaddr_in address{};
  const int listener = Listen(&address, /*nonblocking=*/false);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  absl::Cleanup close_listener = [listener] { close(listener); };
  AcceptPacer::Process().Register(listener, "test listener");
  absl::Cleanup unregister = [listener] {
    AcceptPacer::Process().Unregister(listener);
  };
  const int client = Connect(address);
  ASSERT_GE(client, 0);
  absl::Cleanup close_client = [client] { close(client); };
  const AcceptPacer::Counts before = AcceptPacer::Process().counts();

  FullDescriptorTable full;
  ASSERT_TRUE(full.ok());
  const MonoTime start = MonoNow();
  errno = 0;
  EXPECT_EQ(accept(listener, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EMFILE);
  const absl::Duration took = MonoNow() - start;
  full.Restore();
  EXPECT_GE(took, AcceptPacer::Options{}.pause);
  EXPECT_EQ(AcceptPacer::Process().counts().paced, before.paced + 1);
  EXPECT_EQ(AcceptPacer::Process().counts().episodes, before.episodes + 1);

  const int fd = accept(listener, nullptr, nullptr);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  close(fd);
  EXPECT_EQ(AcceptPacer::Process().counts().recovered, before.recovered + 1);
}

// Any other listener (Gloo's pairs accept on blocking listeners from their
// event loop) gets the failure at once, unpaced.
TEST_F(Accept4InterposerTest, AcceptOnAnUnregisteredListenerIsNotPaced) {
  sockaddr_in address{};
  const int listener = Listen(&address, /*nonblocking=*/false);
  ASSERT_GE(listener, 0);
  absl::Cleanup close_listener = [listener] { close(listener); };
  const int client = Connect(address);
  ASSERT_GE(client, 0);
  absl::Cleanup close_client = [client] { close(client); };
  const AcceptPacer::Counts before = AcceptPacer::Process().counts();
  FullDescriptorTable full;
  ASSERT_TRUE(full.ok());
  errno = 0;
  EXPECT_EQ(accept(listener, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EMFILE);
  full.Restore();
  EXPECT_EQ(AcceptPacer::Process().counts().paced, before.paced);
  const int fd = accept(listener, nullptr, nullptr);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  close(fd);
}

TEST_F(Accept4InterposerTest, OtherErrorsAndSuccessesPassThroughUnchanged) {
  errno = 0;
  EXPECT_EQ(accept4(-1, nullptr, nullptr, 0), -1);
  EXPECT_EQ(errno, EBADF);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  errno = 0;
  EXPECT_EQ(accept4(pipe_fds[0], nullptr, nullptr, 0), -1);
  EXPECT_EQ(errno, ENOTSOCK);
  errno = 0;
  EXPECT_EQ(accept(pipe_fds[0], nullptr, nullptr), -1);
  EXPECT_EQ(errno, ENOTSOCK);
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  sockaddr_in address{};
  const int listener = Listen(&address);
  ASSERT_GE(listener, 0);
  absl::Cleanup close_listener = [listener] { close(listener); };
  errno = 0;
  EXPECT_EQ(accept4(listener, nullptr, nullptr, 0), -1);  // Nothing queued.
  EXPECT_EQ(errno, EAGAIN);
  const int client = Connect(address);
  ASSERT_GE(client, 0);
  absl::Cleanup close_client = [client] { close(client); };
  sockaddr_in peer{};
  socklen_t length = sizeof(peer);
  const int fd = accept4(listener, reinterpret_cast<sockaddr*>(&peer), &length,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(length, sizeof(peer));
  EXPECT_EQ(peer.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  close(fd);
}

}  // namespace
}  // namespace shardd::rpc
