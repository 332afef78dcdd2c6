#include "daemon/node/shared_memory_init_reader.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/dtype.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

constexpr int64_t kWindow = SharedMemoryInitReader::kWindowBytes;

// A real file with `prefix` junk bytes, then fp32 values 0.5 * i, for
// windows to be crossed.
class SharedMemoryInitReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    path_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/init-XXXXXX";
    const int fd = mkstemp(path_.data());
    ASSERT_GE(fd, 0);
    close(fd);
  }
  void TearDown() override { unlink(path_.c_str()); }

  void Write(const std::string& bytes) {
    const int fd = open(path_.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
    close(fd);
  }

  core::SharedMemorySource Source(int64_t offset, int64_t length) const {
    return {path_, offset + length, offset, length};
  }

  std::string path_;
};

std::string Fp32Bytes(int64_t n) {
  std::string bytes(n * 4, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.5f * static_cast<float>(i);
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  }
  return bytes;
}

TEST_F(SharedMemoryInitReaderTest, ChecksumEqualsCrcOfTheBytesAcrossWindows) {
  // 2.5 windows of values at an offset that is not page aligned.
  const std::string values = Fp32Bytes((5 * kWindow / 2) / 4);
  Write(std::string(100, 'x') + values);
  absl::StatusOr<uint32_t> crc = SharedMemoryInitReader::Checksum(
      Source(100, static_cast<int64_t>(values.size())), "f");
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_EQ(*crc, core::Crc32c(values.data(), values.size()));
}

TEST_F(SharedMemoryInitReaderTest, ReadsOnlyTheSliceAskedForAcrossWindows) {
  const int64_t n = (5 * kWindow / 2) / 4;
  const std::string values = Fp32Bytes(n);
  Write(std::string(12, 'x') + values);
  const core::SharedMemorySource source =
      Source(12, static_cast<int64_t>(values.size()));
  // A slice that straddles the first window boundary, and the tail.
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{
           {kWindow / 4 - 3, 1000}, {n - 7, 7}, {0, n}}) {
    std::vector<float> out(count + 1, -1.0f);
    ASSERT_TRUE(SharedMemoryInitReader::Read(source, core::DType::kFloat32,
                                             first, count, out.data(), "f")
                    .ok());
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[i], 0.5f * static_cast<float>(first + i)) << first + i;
    }
    EXPECT_EQ(out[count], -1.0f) << "wrote past the slice";
  }
}

TEST_F(SharedMemoryInitReaderTest, WidensBFloat16Exactly) {
  std::string bytes(2 * 10, '\0');
  for (int i = 0; i < 10; ++i) {
    const uint16_t bits = core::FloatToBFloat16(0.25f * i - 1.0f);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  }
  Write(bytes);
  std::vector<float> out(4);
  ASSERT_TRUE(SharedMemoryInitReader::Read(
                  Source(0, 20), core::DType::kBFloat16, 3, 4, out.data(), "f")
                  .ok());
  EXPECT_EQ(out, (std::vector<float>{-0.25f, 0.0f, 0.25f, 0.5f}));
}

TEST_F(SharedMemoryInitReaderTest, MissingFileIsNotFoundNamingTheField) {
  core::SharedMemorySource source = Source(0, 16);
  source.path += ".gone";
  const absl::StatusOr<uint32_t> crc = SharedMemoryInitReader::Checksum(
      source, "model.units[0].tensors[1].init.shared_memory");
  EXPECT_EQ(crc.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(crc.status().message(),
                                "units[0].tensors[1].init.shared_memory"))
      << crc.status();
}

TEST_F(SharedMemoryInitReaderTest, FileShorterThanTheRangeIsInvalid) {
  Write(std::string(64, 'x'));
  const absl::StatusOr<uint32_t> crc =
      SharedMemoryInitReader::Checksum(Source(16, 64), "f");
  EXPECT_EQ(crc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(crc.status().message(), "has 64 bytes"))
      << crc.status();
}

TEST_F(SharedMemoryInitReaderTest, SliceOutsideTheValuesIsInvalid) {
  Write(Fp32Bytes(8));
  std::vector<float> out(4);
  EXPECT_EQ(SharedMemoryInitReader::Read(Source(0, 32), core::DType::kFloat32,
                                         6, 4, out.data(), "f")
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::node
