#include "daemon/comm/file_store.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/file_store_XXXXXX");
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  char* dir = mkdtemp(buffer.data());
  EXPECT_NE(dir, nullptr);
  return dir != nullptr ? std::string(dir) : std::string();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* entry = readdir(d)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

TEST(FileStoreTest, GetReturnsWhatSetStoredAndSetOverwrites) {
  FileStore store(MakeTempDir());
  const std::string value("bin\0ary", 7);
  ASSERT_TRUE(store.Set("k", value).ok());
  auto got = store.Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  ASSERT_TRUE(store.Set("k", "second").ok());
  EXPECT_EQ(*store.Get("k"), "second");
}

TEST(FileStoreTest, GetOfMissingKeyIsNotFound) {
  FileStore store(MakeTempDir());
  EXPECT_EQ(store.Get("missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(FileStoreTest, KeysWithSlashesAndDotsAreDistinctFilesInOneDirectory) {
  const std::string dir = MakeTempDir();
  FileStore store(dir);
  const std::vector<std::string> keys = {
      "epoch/1/world/0", "epoch%2F1",       "..", ".", "", "a b",
      "../escape",       "epoch/1/world/0/"};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store.Set(keys[i], absl::StrCat("v", i)).ok()) << keys[i];
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = store.Get(keys[i]);
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
    EXPECT_EQ(*got, absl::StrCat("v", i)) << keys[i];
  }
  // One plain file per key, nothing outside the directory, no temporaries.
  EXPECT_EQ(ListDir(dir).size(), keys.size());
}

TEST(FileStoreTest, WaitTimesOutNamingTheFirstMissingKey) {
  FileStore store(MakeTempDir());
  ASSERT_TRUE(store.Set("a", "1").ok());
  const MonoTime start = MonoNow();
  absl::Status status = store.Wait({"a", "b/c"}, absl::Milliseconds(150));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("'b/c'"), absl::string_view::npos) << status;
  EXPECT_GE(MonoNow() - start, absl::Milliseconds(140));
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
}

TEST(FileStoreTest, WaitSeesKeysAnotherThreadSets) {
  const std::string dir = MakeTempDir();
  FileStore writer(dir);
  FileStore reader(dir);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(30));
    ASSERT_TRUE(writer.Set("x/1", "one").ok());
  });
  EXPECT_TRUE(reader.Wait({"x/1"}, absl::Seconds(10)).ok());
  EXPECT_EQ(*reader.Get("x/1"), "one");
  setter.join();
}

// Two processes rendezvous through real files: each publishes its value and
// reads the other's, as the Gloo rendezvous does.
TEST(FileStoreTest, TwoProcessesExchangeValuesThroughTheDirectory) {
  const std::string dir = MakeTempDir();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FileStore store(dir);
    if (!store.Set("rank/1", "from child").ok()) _exit(2);
    if (!store.Wait({"rank/0"}, absl::Seconds(20)).ok()) _exit(3);
    auto got = store.Get("rank/0");
    if (!got.ok() || *got != "from parent") _exit(4);
    _exit(0);
  }
  FileStore store(dir);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(store.Set("rank/0", "from parent").ok());
  ASSERT_TRUE(store.Wait({"rank/1"}, absl::Seconds(20)).ok());
  EXPECT_EQ(*store.Get("rank/1"), "from child");
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

TEST(FileStoreTest, SetIntoAMissingDirectoryIsUnavailable) {
  FileStore store("/nonexistent/shardd/file_store");
  EXPECT_EQ(store.Set("k", "v").code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardd::comm
