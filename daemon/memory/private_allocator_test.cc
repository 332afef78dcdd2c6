#include "daemon/memory/private_allocator.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

// Resident bytes of this process's mappings that contain `p`, from
// /proc/self/smaps ("Rss:" of the mapping whose range holds p); -1 if none.
int64_t ResidentBytesOfMappingAt(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos &&
        dash < space && line.find(':') > space) {
      uint64_t lo = 0, hi = 0;
      inside =
          absl::SimpleHexAtoi(line.substr(0, dash), &lo) &&
          absl::SimpleHexAtoi(line.substr(dash + 1, space - dash - 1), &hi) &&
          lo <= addr && addr < hi;
      continue;
    }
    absl::string_view rest = line;
    if (inside && absl::ConsumePrefix(&rest, "Rss:")) {
      int64_t kb = 0;
      rest = absl::StripAsciiWhitespace(absl::StripSuffix(rest, "kB"));
      return absl::SimpleAtoi(rest, &kb) ? kb * 1024 : -1;
    }
  }
  return -1;
}

class PrivateAllocatorTest : public ::testing::Test {
 protected:
  PrivateAllocator allocator_;
};

TEST_F(PrivateAllocatorTest, BufferIsExactlySizedUnnamedAndHugePageAligned) {
  const int64_t bytes = (int64_t{5} << 20) + 7;
  auto buffer = allocator_.Allocate("optimizer_state", bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), bytes);  // What memory accounting counts.
  EXPECT_TRUE((*buffer)->name().empty());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % (2 << 20), 0u);
}

TEST_F(PrivateAllocatorTest, BufferIsZeroedAndAlreadyResident) {
  const int64_t bytes = int64_t{24} << 20;
  auto buffer = allocator_.Allocate("grad_shards", bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  // Pre-faulted at allocation: every page is resident before any touch.
  EXPECT_GE(ResidentBytesOfMappingAt((*buffer)->data()), bytes);
  const uint8_t* data = (*buffer)->data();
  for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(data[i], 0) << i;
}

TEST_F(PrivateAllocatorTest, BuffersAreIndependentAndUnmappedOnDestruction) {
  for (int round = 0; round < 3; ++round) {
    auto a = allocator_.Allocate("a", int64_t{8} << 20);
    auto b = allocator_.Allocate("b", int64_t{8} << 20);
    ASSERT_TRUE(a.ok() && b.ok());
    std::memset((*a)->data(), 0xab, (*a)->size());
    EXPECT_EQ((*b)->data()[0], 0);
    EXPECT_EQ((*b)->data()[(*b)->size() - 1], 0);
    const void* where = (*a)->data();
    a->reset();
    EXPECT_EQ(ResidentBytesOfMappingAt(where), -1) << "still mapped";
  }
}

TEST_F(PrivateAllocatorTest, RejectsEmptyBufferNamingIt) {
  auto buffer = allocator_.Allocate("param_shards", 0);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(buffer.status().message().find("param_shards"), std::string::npos);
}

TEST_F(PrivateAllocatorTest, ImpossibleSizeIsResourceExhausted) {
  auto buffer = allocator_.Allocate("huge", int64_t{1} << 60);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace shardd::memory
