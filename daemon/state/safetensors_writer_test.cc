#include "daemon/state/safetensors_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"
#include "gtest/gtest.h"

namespace shardd::state {
namespace {

std::string TempDir() {
  std::string base = "/tmp/shardd-stw-XXXXXX";
  char* made = mkdtemp(base.data());
  EXPECT_NE(made, nullptr);
  return base;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The names in `dir` (but . and ..).
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out.push_back(e->d_name);
    }
  }
  closedir(d);
  return out;
}

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir(); }
  void TearDown() override {
    for (const std::string& e : Entries(dir_)) {
      unlink(absl::StrCat(dir_, "/", e).c_str());
    }
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(SafetensorsWriterTest, StreamsHeaderThenDataInPiecesAndChecksumsFile) {
  const std::string path = absl::StrCat(dir_, "/m.safetensors");
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {7, 8};
  auto writer = SafetensorsWriter::Create(
      path, {{"u.a", "F32", {2, 3}, 24}, {"u.b", "F32", {2}, 8}},
      {{"format", "shardd"}, {"step", "3"}}, /*overwrite=*/false);
  ASSERT_TRUE(writer.ok()) << writer.status();
  // Pieces that do not follow tensor boundaries.
  ASSERT_TRUE((*writer)->Append(a.data(), 10).ok());
  ASSERT_TRUE(
      (*writer)->Append(reinterpret_cast<const char*>(a.data()) + 10, 14).ok());
  EXPECT_EQ(access(path.c_str(), F_OK), -1) << "visible before Finish";
  ASSERT_TRUE((*writer)->Append(b.data(), 8).ok());
  auto file = (*writer)->Finish();
  ASSERT_TRUE(file.ok()) << file.status();

  const std::string bytes = ReadFile(path);
  const std::string header =
      SafetensorsHeader({{"u.a", "F32", {2, 3}, 24}, {"u.b", "F32", {2}, 8}},
                        {{"format", "shardd"}, {"step", "3"}});
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_TRUE(absl::StartsWith(
      header,
      "{\"__metadata__\":{\"format\":\"shardd\",\"step\":\"3\"},"
      "\"u.a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"u.b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}"))
      << header;
  ASSERT_EQ(bytes.size(), 8 + header.size() + 32);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n, header.size());
  EXPECT_EQ(bytes.substr(8, n), header);
  std::vector<float> data(8);
  std::memcpy(data.data(), bytes.data() + 8 + n, 32);
  EXPECT_EQ(data, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(file->path, path);
  EXPECT_EQ(file->bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(file->crc32c, core::Crc32c(bytes.data(), bytes.size()));
  EXPECT_EQ(Entries(dir_), std::vector<std::string>{"m.safetensors"});
}

TEST_F(SafetensorsWriterTest, RefusesExistingFileWithoutOverwrite) {
  const std::string path = absl::StrCat(dir_, "/m.safetensors");
  std::ofstream(path) << "old";
  auto refused = SafetensorsWriter::Create(path, {{"t", "F32", {1}, 4}}, {},
                                           /*overwrite=*/false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), path));
  EXPECT_EQ(ReadFile(path), "old");
  auto replaced = SafetensorsWriter::Create(path, {{"t", "F32", {1}, 4}}, {},
                                            /*overwrite=*/true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  const float one = 1;
  ASSERT_TRUE((*replaced)->Append(&one, 4).ok());
  ASSERT_TRUE((*replaced)->Finish().ok());
  EXPECT_EQ(ReadFile(path).size(), (*replaced)->total_bytes());
}

TEST_F(SafetensorsWriterTest, AbandonedWriterLeavesNoFile) {
  const std::string path = absl::StrCat(dir_, "/m.safetensors");
  {
    auto writer =
        SafetensorsWriter::Create(path, {{"t", "F32", {4}, 16}}, {}, false);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const float half[2] = {1, 2};
    ASSERT_TRUE((*writer)->Append(half, 8).ok());
    EXPECT_EQ(Entries(dir_).size(), 1u);  // The temporary file.
  }
  EXPECT_TRUE(Entries(dir_).empty());
}

TEST_F(SafetensorsWriterTest, RejectsBytesPastTheDeclaredSizesOrMissing) {
  const std::string path = absl::StrCat(dir_, "/m.safetensors");
  const float v[4] = {1, 2, 3, 4};
  auto over =
      SafetensorsWriter::Create(path, {{"t", "F32", {2}, 8}}, {}, false);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ((*over)->Append(v, 16).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*over)->Finish().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Entries(dir_).empty());
  auto missing =
      SafetensorsWriter::Create(path, {{"t", "F32", {2}, 8}}, {}, false);
  ASSERT_TRUE(missing.ok());
  ASSERT_TRUE((*missing)->Append(v, 4).ok());
  auto finished = (*missing)->Finish();
  EXPECT_EQ(finished.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(finished.status().message(), "4 of"))
      << finished.status();
  EXPECT_TRUE(Entries(dir_).empty());
}

// Runs `body` in a child process; returns its exit code and what it wrote
// to the pipe (a status message).
struct ChildResult {
  int exit_code = -1;
  std::string message;
};
ChildResult InChild(const std::function<int(int out_fd)>& body) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    _exit(body(fds[1]));
  }
  close(fds[1]);
  ChildResult result;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0)
    result.message.append(buf, n);
  close(fds[0]);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

// Writes a 1 MiB file in 64 KiB pieces; reports the status as exit code
// (its StatusCode) and message.
int WriteMegabyte(const std::string& path, int out_fd) {
  const std::string piece(64 << 10, 'x');
  absl::Status status;
  auto writer = SafetensorsWriter::Create(
      path, {{"t", "U8", {1 << 20}, 1 << 20}}, {}, false);
  if (!writer.ok()) {
    status = writer.status();
  } else {
    for (int i = 0; i < 16 && status.ok(); ++i) {
      status = (*writer)->Append(piece.data(), piece.size());
    }
    if (status.ok()) status = (*writer)->Finish().status();
  }
  const std::string message(status.message());
  (void)!write(out_fd, message.data(), message.size());
  return static_cast<int>(status.code());
}

TEST_F(SafetensorsWriterTest, FileSizeLimitIsResourceExhaustedNamingThePath) {
  const std::string path = absl::StrCat(dir_, "/big.safetensors");
  const ChildResult child = InChild([&](int out_fd) {
    signal(SIGXFSZ, SIG_IGN);  // write then fails with EFBIG.
    rlimit limit{256 << 10, 256 << 10};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 100;
    return WriteMegabyte(path, out_fd);
  });
  EXPECT_EQ(child.exit_code,
            static_cast<int>(absl::StatusCode::kResourceExhausted))
      << child.message;
  EXPECT_TRUE(absl::StrContains(child.message, path)) << child.message;
  EXPECT_TRUE(Entries(dir_).empty()) << "partial file left";
}

// ENOSPC from a real full file system: a 256 KiB tmpfs mounted in a child's
// own mount namespace (skipped where mounting is not allowed).
TEST_F(SafetensorsWriterTest,
       FullFileSystemIsResourceExhaustedAndLeavesNoFile) {
  constexpr int kSkipped = 77, kLeftovers = 78;
  const std::string path = absl::StrCat(dir_, "/big.safetensors");
  const ChildResult child = InChild([&](int out_fd) {
    if (unshare(CLONE_NEWNS) != 0 &&
        unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      return kSkipped;
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=256k") != 0) {
      return kSkipped;
    }
    // In an unprivileged user namespace without a uid map, files cannot be
    // created at all: nothing to test there.
    const std::string probe = absl::StrCat(dir_, "/probe");
    const int fd = open(probe.c_str(), O_WRONLY | O_CREAT, 0600);
    if (fd < 0) return kSkipped;
    close(fd);
    unlink(probe.c_str());
    const int code = WriteMegabyte(path, out_fd);
    if (!Entries(dir_).empty()) return kLeftovers;
    return code;
  });
  if (child.exit_code == kSkipped) GTEST_SKIP() << "cannot mount a tmpfs";
  EXPECT_EQ(child.exit_code,
            static_cast<int>(absl::StatusCode::kResourceExhausted))
      << child.message;
  EXPECT_TRUE(absl::StrContains(child.message, path)) << child.message;
  EXPECT_TRUE(absl::StrContains(child.message, "No space")) << child.message;
}

}  // namespace
}  // namespace shardd::state
