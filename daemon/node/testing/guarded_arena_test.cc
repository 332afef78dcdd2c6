#include "daemon/memory/testing/guarded_arena.h"

#include <cstring>

#include "daemon/node/testing/guarded_engine_math.h"
#include "gtest/gtest.h"

namespace shardd::node::testing {
namespace {

// The guard is real: the host faults on a buffer's address, and only the
// arena's math reaches its bytes.
TEST(GuardedArenaTest, HostAccessFaultsAndTheMathReachesTheBytes) {
  auto arena = memory::testing::GuardedArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  std::shared_ptr<memory::testing::GuardedArena> shared = std::move(*arena);
  auto buffer = shared->Allocate("b", 100);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  uint8_t* p = (*buffer)->data();
  EXPECT_DEATH({ p[3] = 1; }, "");
  GuardedEngineMath math(shared);
  const float in[3] = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(math.Upload(p + 4, in, sizeof(in)).ok());
  float out[3] = {};
  ASSERT_TRUE(math.Download(out, p + 4, sizeof(out)).ok());
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
  // Fresh memory is zero.
  ASSERT_TRUE(math.Download(out, p + 16, sizeof(out)).ok());
  EXPECT_EQ(out[0], 0.0f);
}

TEST(GuardedArenaTest, MathRejectsHostPointersAsDeviceMemory) {
  auto arena = memory::testing::GuardedArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok());
  GuardedEngineMath math(std::move(*arena));
  float host[4] = {};
  const absl::Status s = math.Zero(host, sizeof(host));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not device memory"), std::string::npos) << s;
}

TEST(GuardedArenaTest, RunsOutOfRoomWithAClearStatus) {
  auto arena = memory::testing::GuardedArena::Create(8192);
  ASSERT_TRUE(arena.ok());
  ASSERT_TRUE((*arena)->Allocate("a", 4096).ok());
  auto b = (*arena)->Allocate("b", 4097);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*arena)->Allocate("c", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::node::testing
