#include "daemon/memory/byte_buffer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

// The VmFlags line of the /proc/self/smaps entry that contains `p`, or "".
std::string VmFlagsOf(const void* p) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    // Entry headers look like "7f0000000000-7f0000200000 rw-p ...".
    const std::string range = line.substr(0, line.find(' '));
    const size_t dash = range.find('-');
    uint64_t lo = 0, hi = 0;
    if (dash != std::string::npos &&
        absl::SimpleHexAtoi(range.substr(0, dash), &lo) &&
        absl::SimpleHexAtoi(range.substr(dash + 1), &hi)) {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && absl::StartsWith(line, "VmFlags:")) return line;
  }
  return "";
}

class HeapAllocatorTest : public ::testing::Test {
 protected:
  HeapAllocator allocator_;
};

TEST_F(HeapAllocatorTest, SmallBufferIsZeroedPageAlignedAndExactlySized) {
  auto buffer = allocator_.Allocate("small", 10'000);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), 10'000);
  EXPECT_TRUE((*buffer)->name().empty());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % 4096, 0u);
  for (int64_t i = 0; i < (*buffer)->size(); ++i) {
    ASSERT_EQ((*buffer)->data()[i], 0) << i;
  }
}

TEST_F(HeapAllocatorTest, LargeBufferIsHugePageAlignedAndAdvised) {
  const int64_t bytes = (int64_t{24} << 20) + 12'345;  // Not a page multiple.
  auto buffer = allocator_.Allocate("large", bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), bytes);  // What memory accounting counts.
  uint8_t* data = (*buffer)->data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % (2 << 20), 0u);
  for (int64_t i = 0; i < bytes; i += 4096) ASSERT_EQ(data[i], 0) << i;
  EXPECT_EQ(data[bytes - 1], 0);
  // Writable to the end of the last page.
  data[(bytes + 4095) / 4096 * 4096 - 1] = 7;
  // madvise(MADV_HUGEPAGE) shows as "hg" in the mapping's VmFlags.
  const std::string flags = VmFlagsOf(data);
  ASSERT_FALSE(flags.empty());
  const std::vector<std::string> words = absl::StrSplit(flags, ' ');
  EXPECT_NE(std::find(words.begin(), words.end(), "hg"), words.end()) << flags;
}

TEST_F(HeapAllocatorTest, BuffersAreIndependentAndFreedOnDestruction) {
  for (int round = 0; round < 3; ++round) {
    auto a = allocator_.Allocate("a", int64_t{16} << 20);
    auto b = allocator_.Allocate("b", int64_t{16} << 20);
    ASSERT_TRUE(a.ok() && b.ok());
    std::memset((*a)->data(), 0xab, (*a)->size());
    EXPECT_EQ((*b)->data()[0], 0);
    EXPECT_EQ((*b)->data()[(*b)->size() - 1], 0);
  }
}

TEST_F(HeapAllocatorTest, RejectsNonPositiveSizeNamingTheBuffer) {
  for (int64_t bad : {int64_t{0}, int64_t{-1}}) {
    auto buffer = allocator_.Allocate("unit3.gathered", bad);
    ASSERT_FALSE(buffer.ok());
    EXPECT_EQ(buffer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(buffer.status().message(), "unit3.gathered"));
  }
}

TEST_F(HeapAllocatorTest, ImpossibleSizeIsResourceExhausted) {
  auto buffer = allocator_.Allocate("huge", int64_t{1} << 56);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(buffer.status().message(), "huge"));
}

}  // namespace
}  // namespace shardd::memory
