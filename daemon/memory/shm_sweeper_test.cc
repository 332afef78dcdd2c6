#include "daemon/memory/shm_sweeper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/memory/shm_owner_lock.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

class ShmSweeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/sweep-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  }

  // A file of `bytes` bytes (really allocated) named `name` in the folder.
  void File(const std::string& name, int64_t bytes) {
    std::ofstream out(Path(name), std::ios::binary);
    out << std::string(static_cast<size_t>(bytes), 'x');
  }
  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }
  bool Exists(const std::string& name) const {
    return ::access(Path(name).c_str(), F_OK) == 0;
  }

  // A child process that takes the owner lock of `prefix` and creates
  // `files` segments of 64 KiB, then waits until `release` is written to
  // (or exits at once when `hold` is false). Returns its pid.
  pid_t Daemon(const std::string& prefix, int files, bool hold,
               int* release_fd) {
    int ready[2], release[2];
    EXPECT_EQ(::pipe(ready), 0);
    EXPECT_EQ(::pipe(release), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Only the parent writes the release pipe: its EOF ends the wait.
      ::close(release[1]);
      ::close(ready[0]);
      auto lock = ShmOwnerLock::Acquire(dir_, prefix);
      if (!lock.ok()) ::_exit(2);
      for (int i = 0; i < files; ++i)
        File(absl::StrCat(prefix, ".", i, ".seg"), 65536);
      char c = 1;
      (void)!::write(ready[1], &c, 1);
      if (hold) (void)!::read(release[0], &c, 1);
      ::_exit(0);  // The lock dies with the process (no destructor runs).
    }
    char c;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ::close(ready[1]);
    ::close(release[0]);
    *release_fd = release[1];
    return pid;
  }

  static void Reap(pid_t pid) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  }

  std::string dir_;
};

TEST_F(ShmSweeperTest, DeadOwnersFilesAreRemovedWithTheirBytes) {
  int release = -1;
  const pid_t child = Daemon("shardd-77", 3, /*hold=*/false, &release);
  Reap(child);
  ::close(release);
  auto swept = SweepShmDirectory(dir_, "shardd-");
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(swept->files_removed, 4);  // 3 segments and the owner file.
  EXPECT_GE(swept->bytes_removed, 3 * 65536);
  ASSERT_EQ(swept->removed.size(), 1u);
  EXPECT_EQ(swept->removed[0].rfind("shardd-77: 4 files", 0), 0u)
      << swept->removed[0];
  for (int i = 0; i < 3; ++i)
    EXPECT_FALSE(Exists(absl::StrCat("shardd-77.", i, ".seg")));
  EXPECT_FALSE(Exists("shardd-77.owner"));
  // Nothing left: a second sweep removes nothing.
  EXPECT_EQ(SweepShmDirectory(dir_, "shardd-")->files_removed, 0);
}

TEST_F(ShmSweeperTest, TwoLiveDaemonsSharingTheFolderKeepEachOthersFiles) {
  int release_a = -1, release_b = -1;
  const pid_t a = Daemon("shardd-101", 2, /*hold=*/true, &release_a);
  const pid_t b = Daemon("shardd-102", 2, /*hold=*/true, &release_b);
  auto swept = SweepShmDirectory(dir_, "shardd-");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->files_removed, 0);
  EXPECT_EQ(swept->unknown_bytes, 0);
  EXPECT_TRUE(Exists("shardd-101.0.seg"));
  EXPECT_TRUE(Exists("shardd-102.1.seg"));
  // b dies; a lives on: only b's files go.
  ::close(release_b);
  Reap(b);
  swept = SweepShmDirectory(dir_, "shardd-");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->files_removed, 3);
  EXPECT_TRUE(Exists("shardd-101.0.seg"));
  EXPECT_FALSE(Exists("shardd-102.0.seg"));
  ::close(release_a);
  Reap(a);
}

TEST_F(ShmSweeperTest, OwnLiveLockKeepsOwnFiles) {
  auto lock = ShmOwnerLock::Acquire(dir_, "shardd-5");
  ASSERT_TRUE(lock.ok()) << lock.status();
  File("shardd-5.0.seg", 4096);
  EXPECT_EQ(SweepShmDirectory(dir_, "shardd-")->files_removed, 0);
  EXPECT_TRUE(Exists("shardd-5.0.seg"));
  // A second owner of the same prefix is refused while the first lives.
  auto twin = ShmOwnerLock::Acquire(dir_, "shardd-5");
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kAlreadyExists);
  lock->reset();  // Gone: the owner file with it.
  EXPECT_FALSE(Exists("shardd-5.owner"));
}

TEST_F(ShmSweeperTest, SamePrefixAfterACrashTakesTheDeadOwnersPlace) {
  // A restarted sidecar often has the same pid as the one that crashed.
  int release = -1;
  const pid_t child = Daemon("shardd-1", 1, /*hold=*/false, &release);
  Reap(child);
  ::close(release);
  ASSERT_TRUE(Exists("shardd-1.owner"));
  auto lock = ShmOwnerLock::Acquire(dir_, "shardd-1");
  ASSERT_TRUE(lock.ok()) << lock.status();
}

TEST_F(ShmSweeperTest, NeverTouchesWhatIsNotADaemonsFile) {
  File("notes.txt", 10);
  File("shardd-abc.0.seg", 10);  // Not a pid.
  File("shardd-9", 10);          // No dot.
  File("other-9.0.seg", 10);     // Another family.
  ASSERT_EQ(::mkdir(Path("shardd-999999.dir").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("/etc/passwd", Path("shardd-999998.0.seg").c_str()), 0);
  auto swept = SweepShmDirectory(dir_, "shardd-");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->files_removed, 0);
  for (const char* n : {"notes.txt", "shardd-abc.0.seg", "shardd-9",
                        "other-9.0.seg", "shardd-999999.dir"}) {
    EXPECT_TRUE(Exists(n)) << n;
  }
  struct stat st;
  EXPECT_EQ(::lstat(Path("shardd-999998.0.seg").c_str(), &st), 0);
}

TEST_F(ShmSweeperTest, FilesWithoutAnOwnerFileGoOnlyWhenThePidIsGone) {
  // An older daemon's files (no owner file): a live pid keeps them.
  const std::string mine = absl::StrCat("shardd-", ::getpid(), ".0.seg");
  File(mine, 8192);
  // A pid above the kernel's maximum never exists.
  File("shardd-2147483647.0.seg", 8192);
  auto swept = SweepShmDirectory(dir_, "shardd-");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->files_removed, 1);
  EXPECT_FALSE(Exists("shardd-2147483647.0.seg"));
  EXPECT_TRUE(Exists(mine));
  EXPECT_EQ(swept->unknown_files, 1);
  EXPECT_GE(swept->unknown_bytes, 8192);
}

TEST_F(ShmSweeperTest, ANumberThatIsNoPidLeavesTheFilesAlone) {
  // 0 would have kill() signal our own process group; a number beyond
  // int32 would wrap to another pid.
  File("shardd-0.metrics", 10);
  File("shardd-99999999999.0.seg", 10);
  auto swept = SweepShmDirectory(dir_, "shardd-");
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(swept->files_removed, 0);
  EXPECT_TRUE(Exists("shardd-0.metrics"));
  EXPECT_TRUE(Exists("shardd-99999999999.0.seg"));
  EXPECT_EQ(swept->unknown_files, 2);
}

TEST_F(ShmSweeperTest, MissingFolderIsNotFound) {
  EXPECT_EQ(SweepShmDirectory(dir_ + "/nope", "shardd-").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardd::memory
