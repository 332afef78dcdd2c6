#include "client/init_values_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::client {
namespace {

std::string Dir() {
  const char* tmp = getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(InitValuesFileTest, WritesTensorsBackToBackAndNamesEach) {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f};
  const std::vector<float> b = {-0.5f, 0.25f};
  absl::StatusOr<InitValuesFile> file = InitValuesFile::Write(
      Dir(), {absl::MakeConstSpan(a), absl::MakeConstSpan(b)});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->bytes(), 20);
  const v1::SharedMemoryRef ref = file->Ref(1);
  EXPECT_EQ(ref.path(), file->path());
  EXPECT_EQ(ref.segment_bytes(), 20);
  EXPECT_EQ(ref.byte_offset(), 12);
  EXPECT_EQ(ref.byte_length(), 8);
  const std::string bytes = ReadAll(file->path());
  ASSERT_EQ(bytes.size(), 20u);
  EXPECT_EQ(std::memcmp(bytes.data(), a.data(), 12), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 12, b.data(), 8), 0);
}

TEST(InitValuesFileTest, TheFileGoesWithTheLastOwner) {
  const std::vector<float> a = {1.0f};
  absl::StatusOr<InitValuesFile> file =
      InitValuesFile::Write(Dir(), {absl::MakeConstSpan(a)});
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string path = file->path();
  {
    InitValuesFile moved = *std::move(file);
    EXPECT_EQ(access(path.c_str(), F_OK), 0);
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST(InitValuesFileTest, AMissingDirectoryIsAnError) {
  const std::vector<float> a = {1.0f};
  EXPECT_EQ(
      InitValuesFile::Write(Dir() + "/no/such/dir", {absl::MakeConstSpan(a)})
          .status()
          .code(),
      absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardd::client
