#include "daemon/core/crc32c.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

// Bit at a time, straight from the definition.
uint32_t ReferenceCrc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(Crc32cTest, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros and of 0xFF.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<uint8_t> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
}

TEST(Crc32cTest,
     BothImplementationsMatchReferenceOnRandomLengthsAndAlignments) {
  const std::vector<uint8_t> buffer = RandomBytes(5000, 7);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t offset = rng() % 64;
    const size_t length = rng() % (buffer.size() - offset);
    const uint8_t* p = buffer.data() + offset;
    const uint32_t expected = ReferenceCrc32c(p, length);
    EXPECT_EQ(crc32c_internal::ExtendPortable(0, p, length), expected)
        << "offset " << offset << " length " << length;
    EXPECT_EQ(Crc32c(p, length), expected)
        << "offset " << offset << " length " << length;
    if (crc32c_internal::HardwareAvailable()) {
      EXPECT_EQ(crc32c_internal::ExtendHardware(0, p, length), expected)
          << "offset " << offset << " length " << length;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsChecksumOfConcatenation) {
  const std::vector<uint8_t> buffer = RandomBytes(3000, 3);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t split = rng() % buffer.size();
    const uint32_t whole = Crc32c(buffer.data(), buffer.size());
    const uint32_t first = Crc32c(buffer.data(), split);
    EXPECT_EQ(Crc32cExtend(first, buffer.data() + split, buffer.size() - split),
              whole)
        << "split " << split;
    EXPECT_EQ(crc32c_internal::ExtendPortable(
                  crc32c_internal::ExtendPortable(0, buffer.data(), split),
                  buffer.data() + split, buffer.size() - split),
              whole);
  }
  // Extending by nothing changes nothing.
  EXPECT_EQ(Crc32cExtend(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32cTest, CombineEqualsChecksumOfConcatenation) {
  const std::vector<uint8_t> buffer = RandomBytes(40000, 13);
  std::mt19937 rng(17);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t split = rng() % (buffer.size() + 1);
    const uint32_t whole = Crc32c(buffer.data(), buffer.size());
    const uint32_t a = Crc32c(buffer.data(), split);
    const uint32_t b = Crc32c(buffer.data() + split, buffer.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, buffer.size() - split), whole)
        << "split " << split;
  }
  // An empty B changes nothing; an empty A gives B's checksum.
  EXPECT_EQ(Crc32cCombine(0xDEADBEEFu, 0, 0), 0xDEADBEEFu);
  EXPECT_EQ(Crc32cCombine(0, Crc32c(buffer.data(), 100), 100),
            Crc32c(buffer.data(), 100));
}

TEST(Crc32cTest, CombineHandlesLengthsBeyondFourGiB) {
  // Small lengths agree with extending; lengths past 2^31 (a 64-bit shift
  // count) give the same result in both groupings (associativity).
  const std::vector<uint8_t> zeros(4096, 0);
  const uint32_t z4k = Crc32c(zeros.data(), zeros.size());
  EXPECT_EQ(Crc32cCombine(z4k, z4k, 4096),
            Crc32cExtend(z4k, zeros.data(), zeros.size()));
  const uint64_t big = (uint64_t{1} << 31) + 1;
  const uint32_t x = 0x11111111u, y = 0x22222222u, z = 0x33333333u;
  EXPECT_EQ(Crc32cCombine(Crc32cCombine(x, y, big), z, 1),
            Crc32cCombine(x, Crc32cCombine(y, z, 1), big + 1));
}

TEST(Crc32cTest, InterleavedHardwarePathMatchesPortableAroundStripes) {
  // 3 x 4 KiB blocks run as three chains (Crc32cExtend takes the hardware
  // path where the CPU has SSE4.2); lengths and alignments around the block
  // size and a running starting CRC.
  const std::vector<uint8_t> buffer = RandomBytes(5 * 3 * 4096 + 64, 19);
  for (size_t offset : {0, 1, 3, 8}) {
    for (size_t length :
         {size_t{3 * 4096 - 1}, size_t{3 * 4096}, size_t{3 * 4096 + 1},
          size_t{2 * 3 * 4096 + 7}, size_t{5 * 3 * 4096}}) {
      const uint8_t* p = buffer.data() + offset;
      for (uint32_t start : {0u, 0xCAFEF00Du}) {
        EXPECT_EQ(Crc32cExtend(start, p, length),
                  crc32c_internal::ExtendPortable(start, p, length))
            << "offset " << offset << " length " << length;
      }
    }
  }
}

TEST(Crc32cTest, LargeBufferMatchesPortable) {
  const std::vector<uint8_t> buffer = RandomBytes(1 << 20, 9);
  EXPECT_EQ(
      Crc32c(buffer.data() + 1, buffer.size() - 1),
      crc32c_internal::ExtendPortable(0, buffer.data() + 1, buffer.size() - 1));
}

TEST(Crc32cTest, FoldingPathMatchesPortableAtEveryLengthAndAlignment) {
  if (!crc32c_internal::FoldingAvailable()) {
    GTEST_SKIP() << "this CPU has no AVX-512 VPCLMULQDQ; the folding path "
                    "is not used here";
  }
  const std::vector<uint8_t> buffer = RandomBytes(70'000, 23);
  // Every length up to 1100 (around the 256-byte step and the 16-byte tail)
  // at four alignments, then larger ones, from two starting registers.
  for (size_t offset : {0, 1, 5, 63}) {
    const uint8_t* p = buffer.data() + offset;
    for (size_t length = 0; length <= 1100; ++length) {
      for (uint32_t start : {0u, 0xCAFEF00Du}) {
        ASSERT_EQ(crc32c_internal::ExtendFolding(start, p, length),
                  crc32c_internal::ExtendPortable(start, p, length))
            << "offset " << offset << " length " << length;
      }
    }
    for (size_t length : {size_t{4096}, size_t{65'536 + 17}, size_t{69'000}}) {
      EXPECT_EQ(crc32c_internal::ExtendFolding(7, p, length),
                crc32c_internal::ExtendPortable(7, p, length))
          << "offset " << offset << " length " << length;
    }
  }
  const char* digits = "123456789";
  std::string long_digits;
  for (int i = 0; i < 40; ++i) long_digits += digits;
  EXPECT_EQ(
      crc32c_internal::ExtendFolding(0, long_digits.data(), long_digits.size()),
      ReferenceCrc32c(reinterpret_cast<const uint8_t*>(long_digits.data()),
                      long_digits.size()));
}

}  // namespace
}  // namespace shardd::core
