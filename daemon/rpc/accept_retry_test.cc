#include "daemon/rpc/accept_retry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

constexpr absl::Duration kPeriod = absl::Milliseconds(20);
constexpr absl::Duration kDeadline = absl::Seconds(10);

SocketAddress Inet4(const char* ip, int port) {
  SocketAddress a;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  in4->sin_family = AF_INET;
  in4->sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &in4->sin_addr);
  a.length = sizeof(sockaddr_in);
  return a;
}

SocketAddress Inet6(const char* ip, int port) {
  SocketAddress a;
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET6, ip, &in6->sin6_addr);
  a.length = sizeof(sockaddr_in6);
  return a;
}

SocketAddress Unix(const std::string& path) {
  SocketAddress a;
  auto* un = reinterpret_cast<sockaddr_un*>(&a.storage);
  un->sun_family = AF_UNIX;
  std::memcpy(un->sun_path, path.data(), path.size());
  a.length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return a;
}

// Polls `done` until it holds or kDeadline passes (never a fixed sleep).
bool Eventually(const std::function<bool()>& done) {
  const MonoTime deadline = MonoNow() + kDeadline;
  while (MonoNow() < deadline) {
    if (done()) return true;
    poll(nullptr, 0, 2);
  }
  return done();
}

class AcceptRetryTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (listener_ >= 0) close(listener_);
    if (!dir_.empty()) {
      unlink((dir_ + "/l.sock").c_str());
      rmdir(dir_.c_str());
    }
  }

  // A non-blocking TCP listener on 127.0.0.1 (or bound only, when
  // `listen_too` is false: connecting to it is refused).
  void TcpListener(bool listen_too = true) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    SocketAddress a = Inet4("127.0.0.1", 0);
    ASSERT_EQ(
        bind(listener_, reinterpret_cast<sockaddr*>(&a.storage), a.length), 0);
    if (listen_too) {
      ASSERT_EQ(listen(listener_, 16), 0);
    }
  }

  void UnixListener() {
    char tmpl[] = "/tmp/shardd-accept-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    SocketAddress a = Unix(dir_ + "/l.sock");
    ASSERT_EQ(
        bind(listener_, reinterpret_cast<sockaddr*>(&a.storage), a.length), 0);
    ASSERT_EQ(listen(listener_, 16), 0);
  }

  // Whether a connection waits on the listener within kDeadline.
  bool ConnectionArrives() {
    pollfd p{listener_, POLLIN, 0};
    return poll(&p, 1,
                static_cast<int>(absl::ToInt64Milliseconds(kDeadline))) == 1;
  }

  // Whether `count` connections are accepted (and closed) within kDeadline.
  bool Accepts(int count) {
    int accepted = 0;
    return Eventually([&] {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd >= 0) {
        close(fd);
        ++accepted;
      }
      return accepted == count;
    });
  }

  int listener_ = -1;
  std::string dir_;
};

TEST_F(AcceptRetryTest, DefersShortagesOnNonBlockingListenersOnly) {
  for (int error : {EMFILE, ENFILE, ENOBUFS, ENOMEM}) {
    EXPECT_TRUE(AcceptRetry::ShouldDefer(error, /*nonblocking=*/true)) << error;
    EXPECT_FALSE(AcceptRetry::ShouldDefer(error, /*nonblocking=*/false))
        << error;
  }
  for (int error :
       {EAGAIN, ECONNABORTED, EINTR, EBADF, EINVAL, ENOTSOCK, EPERM, EPROTO}) {
    EXPECT_FALSE(AcceptRetry::ShouldDefer(error, /*nonblocking=*/true))
        << error;
  }
}

TEST_F(AcceptRetryTest, KickTargetIsTheLoopbackForAWildcardAddress) {
  absl::StatusOr<SocketAddress> v4 =
      AcceptRetry::KickTarget(Inet4("0.0.0.0", 7070));
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(AcceptRetry::Describe(*v4), "127.0.0.1:7070");
  absl::StatusOr<SocketAddress> v6 = AcceptRetry::KickTarget(Inet6("::", 7071));
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(AcceptRetry::Describe(*v6), "[::1]:7071");
}

TEST_F(AcceptRetryTest, KickTargetKeepsASpecificAddressAndAUnixPath) {
  absl::StatusOr<SocketAddress> v4 =
      AcceptRetry::KickTarget(Inet4("10.1.2.3", 7070));
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(AcceptRetry::Describe(*v4), "10.1.2.3:7070");
  absl::StatusOr<SocketAddress> v6 =
      AcceptRetry::KickTarget(Inet6("fd00::7", 7071));
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(AcceptRetry::Describe(*v6), "[fd00::7]:7071");
  absl::StatusOr<SocketAddress> un =
      AcceptRetry::KickTarget(Unix("/run/shardd/trainer.sock"));
  ASSERT_TRUE(un.ok()) << un.status();
  EXPECT_EQ(AcceptRetry::Describe(*un), "unix:/run/shardd/trainer.sock");
}

TEST_F(AcceptRetryTest, KickTargetRejectsUnnamedSocketsAndOtherFamilies) {
  SocketAddress unnamed;
  unnamed.storage.ss_family = AF_UNIX;
  unnamed.length = sizeof(sa_family_t);
  EXPECT_EQ(AcceptRetry::KickTarget(unnamed).status().code(),
            absl::StatusCode::kInvalidArgument);
  SocketAddress netlink;
  netlink.storage.ss_family = AF_NETLINK;
  netlink.length = sizeof(sa_family_t) + 8;
  EXPECT_EQ(AcceptRetry::KickTarget(netlink).status().code(),
            absl::StatusCode::kInvalidArgument);
  SocketAddress short_v4;
  short_v4.storage.ss_family = AF_INET;
  short_v4.length = sizeof(sa_family_t);
  EXPECT_EQ(AcceptRetry::KickTarget(short_v4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AcceptRetryTest, KicksADeferredTcpListenerAndTheAcceptEndsTheEpisode) {
  TcpListener();
  AcceptRetry retry({.period = kPeriod});
  retry.Deferred(listener_, EMFILE);
  ASSERT_TRUE(ConnectionArrives());
  const int accepted = accept(listener_, nullptr, nullptr);
  ASSERT_GE(accepted, 0) << std::strerror(errno);
  close(accepted);
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 1; }));
  retry.Accepted(listener_);
  EXPECT_EQ(retry.counts().recovered, 0) << "the queue may hold more";
  retry.Drained(listener_);
  const AcceptRetry::Counts counts = retry.counts();
  EXPECT_EQ(counts.deferred, 1);
  EXPECT_EQ(counts.episodes, 1);
  EXPECT_EQ(counts.accepted, 1);
  EXPECT_EQ(counts.recovered, 1);
  EXPECT_EQ(counts.abandoned, 0);
}

TEST_F(AcceptRetryTest, KicksADeferredUnixListener) {
  UnixListener();
  AcceptRetry retry({.period = kPeriod});
  retry.Deferred(listener_, ENFILE);
  ASSERT_TRUE(ConnectionArrives());
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 1; }));
}

TEST_F(AcceptRetryTest, DeferralsOfOneListenerAreOneEpisodeWithOneKick) {
  TcpListener();
  AcceptRetry retry({.period = kPeriod});
  for (int i = 0; i < 5; ++i) retry.Deferred(listener_, EMFILE);
  ASSERT_TRUE(ConnectionArrives());
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 1; }));
  const AcceptRetry::Counts counts = retry.counts();
  EXPECT_EQ(counts.deferred, 5);
  EXPECT_EQ(counts.episodes, 1);
  // Once the kick landed nothing more is scheduled: a second connection
  // would only come from a deferral after it.
  const int accepted = accept(listener_, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  close(accepted);
  retry.Deferred(listener_, EMFILE);  // The accept after the kick failed.
  ASSERT_TRUE(ConnectionArrives());
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 2; }));
  EXPECT_EQ(retry.counts().episodes, 1);
}

TEST_F(AcceptRetryTest, OnlyItsOwnListenersEmptyQueueEndsAnEpisode) {
  TcpListener();
  AcceptRetry retry({.period = absl::Hours(1)});
  retry.Deferred(listener_, EMFILE);
  retry.Accepted(listener_ + 1000);
  retry.Drained(listener_ + 1000);
  EXPECT_EQ(retry.counts().accepted, 0);
  EXPECT_EQ(retry.counts().recovered, 0);
  retry.Accepted(listener_);
  retry.Accepted(listener_);
  retry.Drained(listener_);
  EXPECT_EQ(retry.counts().accepted, 2);
  EXPECT_EQ(retry.counts().recovered, 1);
  retry.Accepted(listener_);  // No episode open: nothing is counted.
  retry.Drained(listener_);
  EXPECT_EQ(retry.counts().accepted, 2);
  EXPECT_EQ(retry.counts().recovered, 1);
}

// The kick woke the listener, which accepted some and met the shortage
// again before the kicker recorded its kick: the episode is the same, so a
// second kick must follow (else the queue waits for a new connection).
TEST_F(AcceptRetryTest, ShortageAgainRightAfterAKickGetsAnotherKick) {
  TcpListener();
  AcceptRetry retry({.period = kPeriod});
  retry.Deferred(listener_, EMFILE);
  ASSERT_TRUE(ConnectionArrives());
  retry.Deferred(listener_, EMFILE);  // Possibly before the kick is counted.
  ASSERT_TRUE(Accepts(2));
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 2; }));
  EXPECT_EQ(retry.counts().episodes, 1);
}

// An episode ends and the same listener meets a shortage again while the
// kicker is busy with the old episode's kick: the new one is kicked too.
TEST_F(AcceptRetryTest, NewEpisodeOfTheSameListenerIsKickedToo) {
  TcpListener();
  AcceptRetry retry({.period = kPeriod});
  retry.Deferred(listener_, EMFILE);
  ASSERT_TRUE(ConnectionArrives());
  retry.Drained(listener_);
  retry.Deferred(listener_, EMFILE);
  ASSERT_TRUE(Accepts(2));
  EXPECT_EQ(retry.counts().episodes, 2);
}

// Connections accepted since the last kick mean descriptors are coming
// free: the next kick follows within progress_period, not a whole period
// (a queue of many stale connections drains a round per kick).
TEST_F(AcceptRetryTest, AcceptsSinceTheLastKickBringTheNextKickForward) {
  TcpListener();
  AcceptRetry retry(
      {.period = absl::Hours(1), .progress_period = absl::Milliseconds(1)});
  retry.Deferred(listener_, EMFILE);  // Kick due in an hour.
  retry.Accepted(listener_);
  retry.Deferred(listener_, EMFILE);  // Progress: due at once.
  ASSERT_TRUE(ConnectionArrives());
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 1; }));
}

TEST_F(AcceptRetryTest, KeepsKickingWhileOutOfDescriptorsThenGetsThrough) {
  TcpListener();
  AcceptRetry retry({.period = kPeriod});
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  // The lowest free descriptor; below the limit every one is taken, so the
  // kick's socket() fails with EMFILE, as in a full process.
  const int lowest_free = dup(0);
  ASSERT_GE(lowest_free, 0);
  close(lowest_free);
  rlimit full = saved;
  full.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &full), 0);
  retry.Deferred(listener_, EMFILE);
  const bool failed_twice =
      Eventually([&] { return retry.counts().kick_failures >= 2; });
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(failed_twice);
  EXPECT_EQ(retry.counts().kicks, 0);
  ASSERT_TRUE(ConnectionArrives());
  ASSERT_TRUE(Eventually([&] { return retry.counts().kicks == 1; }));
}

TEST_F(AcceptRetryTest, GivesUpWhenNothingListensThere) {
  TcpListener(/*listen_too=*/false);  // Bound, not listening: refused.
  AcceptRetry retry({.period = kPeriod});
  retry.Deferred(listener_, EMFILE);
  ASSERT_TRUE(Eventually([&] { return retry.counts().abandoned == 1; }));
  EXPECT_EQ(retry.counts().kicks, 0);
  retry.Drained(listener_);
  EXPECT_EQ(retry.counts().recovered, 0);
}

TEST_F(AcceptRetryTest, ListenerWithoutAnAddressIsStillDeferred) {
  AcceptRetry retry({.period = kPeriod});
  retry.Deferred(/*listen_fd=*/-1, EMFILE);  // getsockname fails.
  const AcceptRetry::Counts counts = retry.counts();
  EXPECT_EQ(counts.deferred, 1);
  EXPECT_EQ(counts.episodes, 1);
  retry.Drained(-1);
  EXPECT_EQ(retry.counts().recovered, 1);
}

}  // namespace
}  // namespace shardd::rpc
