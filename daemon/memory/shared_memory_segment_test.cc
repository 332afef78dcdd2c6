#include "daemon/memory/shared_memory_segment.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

class SharedMemorySegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl =
        absl::StrCat(base != nullptr ? base : "/tmp", "/shm_test_XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { rmdir(dir_.c_str()); }

  // Runs `child` in a forked process; returns its exit status.
  template <typename Fn>
  static int RunInChild(Fn child) {
    const pid_t pid = fork();
    if (pid == 0) _exit(child());
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  }

  std::string dir_;
};

TEST_F(SharedMemorySegmentTest, CreatesFileWithMode0600AndExactSize) {
  auto segment = SharedMemorySegment::Create(dir_, "seg", 10000);
  ASSERT_TRUE(segment.ok()) << segment.status();
  struct stat st;
  ASSERT_EQ(stat(segment->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_size, 10000);
  EXPECT_EQ(segment->size(), 10000);
  const int64_t page = SharedMemorySegment::PageSize();
  EXPECT_EQ(segment->mapped_size(), (10000 + page - 1) / page * page);
  EXPECT_EQ(segment->path(), absl::StrCat(dir_, "/seg"));
  EXPECT_TRUE(segment->owns_file());
}

TEST_F(SharedMemorySegmentTest, NewSegmentIsZeroFilled) {
  auto segment = SharedMemorySegment::Create(dir_, "seg", 3 * 4096 + 5);
  ASSERT_TRUE(segment.ok()) << segment.status();
  const char* bytes = static_cast<const char*>(segment->data());
  for (int64_t i = 0; i < segment->size(); ++i) ASSERT_EQ(bytes[i], 0) << i;
}

TEST_F(SharedMemorySegmentTest, ChildSeesParentWritesAndParentSeesChildWrites) {
  constexpr int64_t kSize = 1 << 20;
  auto segment = SharedMemorySegment::Create(dir_, "seg", kSize);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto* words = static_cast<uint32_t*>(segment->mutable_data());
  for (int64_t i = 0; i < kSize / 4; ++i) words[i] = static_cast<uint32_t>(i);
  const std::string path = segment->path();

  const int child_status = RunInChild([&]() {
    auto view = SharedMemorySegment::Open(
        path, kSize, SharedMemorySegment::Access::kReadWrite);
    if (!view.ok()) return 1;
    auto* seen = static_cast<uint32_t*>(view->mutable_data());
    for (int64_t i = 0; i < kSize / 4; ++i) {
      if (seen[i] != static_cast<uint32_t>(i)) return 2;
    }
    for (int64_t i = 0; i < kSize / 4; ++i) seen[i] = ~static_cast<uint32_t>(i);
    if (view->owns_file()) return 3;
    return 0;
  });
  ASSERT_EQ(child_status, 0);
  // The parent's own mapping shows the child's writes: no copy anywhere.
  for (int64_t i = 0; i < kSize / 4; ++i) {
    ASSERT_EQ(words[i], ~static_cast<uint32_t>(i)) << i;
  }
  // The child's Open did not remove the file.
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
}

TEST_F(SharedMemorySegmentTest, ReadOnlyOpenSeesDataAndHasNoMutableData) {
  auto segment = SharedMemorySegment::Create(dir_, "seg", 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  std::memcpy(segment->mutable_data(), "hello", 6);
  auto view = SharedMemorySegment::Open(segment->path(), 4096,
                                        SharedMemorySegment::Access::kReadOnly);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->mutable_data(), nullptr);
  EXPECT_STREQ(static_cast<const char*>(view->data()), "hello");
}

TEST_F(SharedMemorySegmentTest, DestructionRemovesTheFile) {
  std::string path;
  {
    auto segment = SharedMemorySegment::Create(dir_, "seg", 4096);
    ASSERT_TRUE(segment.ok()) << segment.status();
    path = segment->path();
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
  }
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(SharedMemorySegmentTest, MoveTransfersOwnershipOnce) {
  auto created = SharedMemorySegment::Create(dir_, "seg", 4096);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string path = created->path();
  SharedMemorySegment moved = std::move(*created);
  EXPECT_EQ(created->data(), nullptr);
  EXPECT_EQ(moved.path(), path);
  { SharedMemorySegment gone = std::move(moved); }
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0);
}

TEST_F(SharedMemorySegmentTest, MissingDirectoryIsNotFoundNamingThePath) {
  auto segment =
      SharedMemorySegment::Create(absl::StrCat(dir_, "/missing"), "seg", 4096);
  ASSERT_FALSE(segment.ok());
  EXPECT_EQ(segment.status().code(), absl::StatusCode::kNotFound);
  {
    const std::string message(segment.status().message());
    EXPECT_NE(message.find("/missing/seg"), std::string::npos) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos)
        << message;
  }
}

TEST_F(SharedMemorySegmentTest, ExistingFileIsAlreadyExists) {
  auto first = SharedMemorySegment::Create(dir_, "seg", 4096);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = SharedMemorySegment::Create(dir_, "seg", 4096);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(SharedMemorySegmentTest, ZeroOrNegativeSizeIsRejected) {
  EXPECT_EQ(SharedMemorySegment::Create(dir_, "seg", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(dir_, "seg", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Open(absl::StrCat(dir_, "/seg"), 0,
                                      SharedMemorySegment::Access::kReadOnly)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SharedMemorySegmentTest, NameWithSlashIsRejected) {
  EXPECT_EQ(SharedMemorySegment::Create(dir_, "a/b", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(dir_, "", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SharedMemorySegmentTest,
       WorldWritableDirectoryWithoutStickyBitIsRefused) {
  const std::string open_dir = absl::StrCat(dir_, "/open");
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  EXPECT_EQ(SharedMemorySegment::Create(open_dir, "seg", 4096).status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_EQ(chmod(open_dir.c_str(), 01777), 0);
  EXPECT_TRUE(SharedMemorySegment::Create(open_dir, "seg", 4096).ok());
  rmdir(open_dir.c_str());
}

TEST_F(SharedMemorySegmentTest, OpenOfMissingFileIsNotFound) {
  auto view = SharedMemorySegment::Open(absl::StrCat(dir_, "/nothing"), 4096,
                                        SharedMemorySegment::Access::kReadOnly);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SharedMemorySegmentTest, OpenLargerThanFileIsFailedPrecondition) {
  auto segment = SharedMemorySegment::Create(dir_, "seg", 100);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto view = SharedMemorySegment::Open(segment->path(), 101,
                                        SharedMemorySegment::Access::kReadOnly);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardd::memory
