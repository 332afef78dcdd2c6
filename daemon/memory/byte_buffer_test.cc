#include "daemon/memory/byte_buffer.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

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

TEST_F(HeapAllocatorTest, LargeBufferIsZeroedToTheLastByte) {
  const int64_t bytes = (int64_t{24} << 20) + 12'345;  // Not a page multiple.
  auto buffer = allocator_.Allocate("large", bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), bytes);  // What memory accounting counts.
  uint8_t* data = (*buffer)->data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 4096, 0u);
  for (int64_t i = 0; i < bytes; i += 4096) ASSERT_EQ(data[i], 0) << i;
  EXPECT_EQ(data[bytes - 1], 0);
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
