#include "daemon/rpc/accept_pacer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

// A blocking listener on 127.0.0.1 (as civetweb's is); -1 on failure.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(address.sin_port);
  return fd;
}

constexpr absl::Duration kPause = absl::Milliseconds(20);

class AcceptPacerTest : public ::testing::Test {
 protected:
  AcceptPacer pacer_{AcceptPacer::Options{kPause}};
};

TEST_F(AcceptPacerTest, ShortagesAreDescriptorsAndKernelMemory) {
  for (int error : {EMFILE, ENFILE, ENOBUFS, ENOMEM}) {
    EXPECT_TRUE(AcceptPacer::IsShortage(error)) << std::strerror(error);
  }
  for (int error : {EAGAIN, ECONNABORTED, EINTR, EBADF, ENOTSOCK, EINVAL}) {
    EXPECT_FALSE(AcceptPacer::IsShortage(error)) << std::strerror(error);
  }
}

TEST_F(AcceptPacerTest, FindsThisProcessListenerByPort) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  absl::Cleanup close_listener = [listener] { close(listener); };
  // A connection to it: a socket on the same machine that does not listen.
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  absl::Cleanup close_client = [client] { close(client); };
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);

  absl::StatusOr<std::vector<int>> found =
      AcceptPacer::FindListeners("127.0.0.1", port);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, std::vector<int>{listener});
  // The same port on another address, or family, is another socket.
  EXPECT_TRUE(
      absl::IsNotFound(AcceptPacer::FindListeners("127.0.0.2", port).status()));
  EXPECT_TRUE(
      absl::IsNotFound(AcceptPacer::FindListeners("0.0.0.0", port).status()));
  EXPECT_TRUE(
      absl::IsNotFound(AcceptPacer::FindListeners("::1", port).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      AcceptPacer::FindListeners("localhost", port).status()));

  close(listener);
  std::move(close_listener).Cancel();
  EXPECT_TRUE(
      absl::IsNotFound(AcceptPacer::FindListeners("127.0.0.1", port).status()));
}

TEST_F(AcceptPacerTest, PacesOnlyShortagesOnRegisteredListeners) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  absl::Cleanup close_listener = [listener] { close(listener); };
  EXPECT_FALSE(pacer_.Failed(listener, EMFILE));  // Not registered.
  pacer_.Register(listener, "test listener");
  EXPECT_FALSE(pacer_.Failed(listener, ECONNABORTED));   // Not a shortage.
  EXPECT_FALSE(pacer_.Failed(listener + 1000, EMFILE));  // Another fd.
  EXPECT_EQ(pacer_.counts().paced, 0);

  const MonoTime start = MonoNow();
  errno = EMFILE;
  EXPECT_TRUE(pacer_.Failed(listener, EMFILE));
  EXPECT_EQ(errno, EMFILE);  // What the failed accept set, for its caller.
  EXPECT_GE(MonoNow() - start, kPause);
  EXPECT_TRUE(pacer_.Failed(listener, ENFILE));
  AcceptPacer::Counts counts = pacer_.counts();
  EXPECT_EQ(counts.paced, 2);
  EXPECT_EQ(counts.episodes, 1);  // One shortage, paced twice.
  EXPECT_EQ(counts.recovered, 0);
}

TEST_F(AcceptPacerTest, AcceptEndsTheEpisodeAndANewShortageBeginsAnother) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  absl::Cleanup close_listener = [listener] { close(listener); };
  pacer_.Register(listener, "test listener");
  pacer_.Accepted(listener);  // No episode open: nothing to end.
  EXPECT_EQ(pacer_.counts().recovered, 0);
  ASSERT_TRUE(pacer_.Failed(listener, EMFILE));
  pacer_.Accepted(listener);
  pacer_.Accepted(listener);
  EXPECT_EQ(pacer_.counts().recovered, 1);
  ASSERT_TRUE(pacer_.Failed(listener, EMFILE));
  const AcceptPacer::Counts counts = pacer_.counts();
  EXPECT_EQ(counts.episodes, 2);
  EXPECT_EQ(counts.paced, 2);
  EXPECT_EQ(counts.recovered, 1);
}

TEST_F(AcceptPacerTest, UnregisteredListenerIsNoLongerPaced) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  absl::Cleanup close_listener = [listener] { close(listener); };
  pacer_.Register(listener, "test listener");
  pacer_.Register(listener, "renamed");  // Once registered, however often.
  ASSERT_TRUE(pacer_.Failed(listener, EMFILE));  // An episode is open.
  pacer_.Unregister(listener);
  EXPECT_FALSE(pacer_.Failed(listener, EMFILE));
  pacer_.Accepted(listener);
  const AcceptPacer::Counts counts = pacer_.counts();
  EXPECT_EQ(counts.paced, 1);
  EXPECT_EQ(counts.recovered, 0);  // Not recovered: no longer watched.
  pacer_.Unregister(listener);     // Twice is harmless.
}

}  // namespace
}  // namespace shardd::rpc
