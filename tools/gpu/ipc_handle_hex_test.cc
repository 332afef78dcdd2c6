#include "tools/gpu/ipc_handle_hex.h"

#include <array>
#include <cstdint>

#include "gtest/gtest.h"

namespace shardd::tools {
namespace {

TEST(IpcHandleHexTest, RoundTripsEveryByteValue) {
  std::array<uint8_t, 256> bytes;
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  const std::string hex = BytesToHex(bytes.data(), bytes.size());
  ASSERT_EQ(hex.size(), 512u);
  EXPECT_EQ(hex.substr(0, 8), "00010203");
  EXPECT_EQ(hex.substr(504), "fcfdfeff");
  std::array<uint8_t, 256> back{};
  ASSERT_TRUE(HexToBytes(hex, back.data(), back.size()).ok());
  EXPECT_EQ(back, bytes);
}

TEST(IpcHandleHexTest, AcceptsUpperCase) {
  uint8_t out[2];
  ASSERT_TRUE(HexToBytes("aBCd", out, 2).ok());
  EXPECT_EQ(out[0], 0xab);
  EXPECT_EQ(out[1], 0xcd);
}

TEST(IpcHandleHexTest, RejectsAWrongLengthAndLeavesTheOutputAlone) {
  uint8_t out[2] = {7, 7};
  const absl::Status s = HexToBytes("abc", out, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "handle: 3 hex digits, want 4");
  EXPECT_EQ(out[0], 7);
}

TEST(IpcHandleHexTest, RejectsANonHexCharacterAndLeavesTheOutputAlone) {
  uint8_t out[2] = {7, 7};
  const absl::Status s = HexToBytes("ab-d", out, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "handle: character 2 is not a hex digit");
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], 7);
}

}  // namespace
}  // namespace shardd::tools
