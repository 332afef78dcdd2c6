#include "daemon/core/write_all.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

TEST(WriteAllTest, WritesEveryByte) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string data(10000, 'x');
  ASSERT_TRUE(WriteAll(fds[1], data, "pipe").ok());
  ::close(fds[1]);
  std::string read(20000, '\0');
  size_t got = 0;
  for (ssize_t n; (n = ::read(fds[0], read.data() + got, 20000 - got)) > 0;) {
    got += static_cast<size_t>(n);
  }
  ::close(fds[0]);
  EXPECT_EQ(read.substr(0, got), data);
}

TEST(WriteAllTest, AnErrorIsTheErrnosNamingThePath) {
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  const absl::Status s = WriteAll(fd, "line\n", "/some/log");
  ::close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;  // EBADF.
  EXPECT_TRUE(absl::StrContains(s.message(), "/some/log: write")) << s;
}

}  // namespace
}  // namespace shardd::core
