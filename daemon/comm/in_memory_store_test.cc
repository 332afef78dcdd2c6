#include "daemon/comm/in_memory_store.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

TEST(InMemoryStoreTest, GetReturnsWhatSetStoredAndSetOverwrites) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("epoch/0/world/0", std::string("a\0b", 3)).ok());
  auto value = store.Get("epoch/0/world/0");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("a\0b", 3));
  ASSERT_TRUE(store.Set("epoch/0/world/0", "new").ok());
  EXPECT_EQ(*store.Get("epoch/0/world/0"), "new");
}

TEST(InMemoryStoreTest, GetOfMissingKeyIsNotFound) {
  InMemoryStore store;
  EXPECT_EQ(store.Get("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(InMemoryStoreTest, WaitReturnsWhenAnotherThreadSetsTheKeys) {
  InMemoryStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("a", "1").ok());
    ASSERT_TRUE(store.Set("b", "2").ok());
  });
  EXPECT_TRUE(store.Wait({"a", "b"}, absl::Seconds(10)).ok());
  setter.join();
}

TEST(InMemoryStoreTest, WaitTimesOutNamingTheFirstMissingKey) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("a", "1").ok());
  const MonoTime start = MonoNow();
  absl::Status status = store.Wait({"a", "b", "c"}, absl::Milliseconds(100));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("'b'"), absl::string_view::npos) << status;
  EXPECT_GE(MonoNow() - start, absl::Milliseconds(90));
}

TEST(InMemoryStoreTest, WaitForNoKeysSucceedsAtOnce) {
  InMemoryStore store;
  EXPECT_TRUE(store.Wait({}, absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace shardd::comm
