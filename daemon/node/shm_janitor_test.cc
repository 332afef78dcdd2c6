#include "daemon/node/shm_janitor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/comm/shm_segment.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

class ShmJanitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/janitor-", ::getpid());
    ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  }
  void TearDown() override {
    for (const std::string& name : made_) ::unlink(name.c_str());
  }
  // A file of `bytes` in /dev/shm named like a communicator segment.
  std::string Segment(int64_t pid, int bytes) {
    const std::string path = absl::StrCat("/dev/shm/", comm::kShmSegmentFamily,
                                          pid, ".e1-janitor-test-", ::getpid());
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::ftruncate(fd, bytes), 0);
    ::close(fd);
    made_.push_back(path);
    return path;
  }
  static bool Exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }

  std::string dir_;
  std::vector<std::string> made_;
};

TEST_F(ShmJanitorTest, RemovesADeadCreatorsCommunicatorSegmentOnly) {
  // A pid above the kernel's maximum never exists: a creator killed before
  // every rank had mapped its segment. Ours is alive: still forming.
  const std::string dead = Segment(2147483647, 4096);
  const std::string live = Segment(::getpid(), 4096);
  absl::StatusOr<std::unique_ptr<ShmJanitor>> janitor = ShmJanitor::Start(
      dir_, absl::StrCat("shardd-", ::getpid()), absl::ZeroDuration(),
      /*observer=*/nullptr);
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  EXPECT_FALSE(Exists(dead));
  EXPECT_TRUE(Exists(live));
  // Not a leftover of the shm directory: a live creator's segment is a
  // communicator forming.
  EXPECT_EQ((*janitor)->leftover_bytes(), 0);
}

}  // namespace
}  // namespace shardd::node
