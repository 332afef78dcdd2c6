#include "daemon/rpc/unix_socket_probe.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

class UnixSocketProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardd-probe-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/s.sock";
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }

  // Binds path_ and, when `listen_too`, listens on it.
  void Bind(bool listen_too) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (listen_too) {
      ASSERT_EQ(listen(fd_, 1), 0);
    }
  }

  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

TEST_F(UnixSocketProbeTest, NothingThereIsFree) {
  EXPECT_TRUE(CheckUnixSocketIsFree(path_).ok());
}

TEST_F(UnixSocketProbeTest, SocketAProcessListensOnIsRefusedNamingThePath) {
  Bind(/*listen_too=*/true);
  const absl::Status s = CheckUnixSocketIsFree(path_);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path_)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "served by a running process"))
      << s;
}

// What a daemon killed with SIGKILL leaves: the file, and nobody accepting.
TEST_F(UnixSocketProbeTest, StaleSocketIsFree) {
  Bind(/*listen_too=*/true);
  close(fd_);
  fd_ = -1;
  EXPECT_TRUE(CheckUnixSocketIsFree(path_).ok());
}

TEST_F(UnixSocketProbeTest, BoundButNotListeningIsFree) {
  Bind(/*listen_too=*/false);
  EXPECT_TRUE(CheckUnixSocketIsFree(path_).ok());
}

TEST_F(UnixSocketProbeTest, RegularFileIsRefused) {
  std::ofstream(path_) << "not a socket";
  const absl::Status s = CheckUnixSocketIsFree(path_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a socket")) << s;
}

}  // namespace
}  // namespace shardd::rpc
