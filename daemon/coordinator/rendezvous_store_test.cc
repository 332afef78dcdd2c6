#include "daemon/coordinator/rendezvous_store.h"

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

TEST(RendezvousStoreTest, SetGetWithinTheCurrentEpoch) {
  RendezvousStore store;
  store.AdvanceEpoch(3);
  ASSERT_TRUE(store.Set(3, "gloo/0", "addr0", false).ok());
  EXPECT_EQ(*store.Get(3, "gloo/0"), "addr0");
  EXPECT_EQ(store.Get(3, "gloo/1").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Set(3, "gloo/0", "x", true).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(RendezvousStoreTest, AKeyIsWrittenOncePerEpochAndARetryIsANoOp) {
  RendezvousStore store;
  store.AdvanceEpoch(3);
  ASSERT_TRUE(store.Set(3, "model/0", "spec", false).ok());
  // A retried call with the same value succeeds and changes nothing.
  EXPECT_TRUE(store.Set(3, "model/0", "spec", false).ok());
  // Another value is refused, naming the rule; the first value stays.
  const absl::Status s = store.Set(3, "model/0", "evil", false);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_NE(s.message().find("once written in an epoch, keeps its value"),
            std::string::npos)
      << s;
  EXPECT_EQ(*store.Get(3, "model/0"), "spec");
  // With if_absent even the same value is ALREADY_EXISTS (as before).
  EXPECT_EQ(store.Set(3, "model/0", "spec", true).code(),
            absl::StatusCode::kAlreadyExists);
  // The next epoch starts empty: the key may be written afresh.
  store.AdvanceEpoch(4);
  EXPECT_TRUE(store.Set(4, "model/0", "other", false).ok());
  EXPECT_EQ(*store.Get(4, "model/0"), "other");
}

TEST(RendezvousStoreTest, AReplaceableKeyTakesANewValue) {
  RendezvousStore store;
  store.AdvanceEpoch(3);
  ASSERT_TRUE(store.Set(3, "model/0", "a", false, /*replace=*/true).ok());
  ASSERT_TRUE(store.Set(3, "model/0", "b", false, /*replace=*/true).ok());
  EXPECT_EQ(*store.Get(3, "model/0"), "b");
  // if_absent still refuses an existing key.
  EXPECT_EQ(store.Set(3, "model/0", "c", true, /*replace=*/true).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(RendezvousStoreTest, StaleAndFutureEpochsAreRejected) {
  RendezvousStore store;
  store.AdvanceEpoch(5);
  EXPECT_EQ(store.Set(4, "k", "v", false).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store.Set(6, "k", "v", false).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Get(4, "k").status().code(), absl::StatusCode::kAborted);
}

TEST(RendezvousStoreTest, AdvancingTheEpochDropsOldKeys) {
  RendezvousStore store;
  store.AdvanceEpoch(1);
  ASSERT_TRUE(store.Set(1, "k", "v", false).ok());
  store.AdvanceEpoch(2);
  EXPECT_EQ(store.Get(2, "k").status().code(), absl::StatusCode::kNotFound);
  store.AdvanceEpoch(1);  // Never goes back.
  EXPECT_EQ(store.epoch(), 2);
}

TEST(RendezvousStoreTest, RejectsOversizedKeysAndValues) {
  RendezvousStore store({8, 16, 2});
  store.AdvanceEpoch(1);
  EXPECT_EQ(store.Set(1, "", "v", false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set(1, "123456789", "v", false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set(1, "k", std::string(17, 'x'), false).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Set(1, "a", "v", false).ok());
  ASSERT_TRUE(store.Set(1, "b", "v", false).ok());
  EXPECT_EQ(store.Set(1, "c", "v", false).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(RendezvousStoreTest, WaitReturnsOnceEveryKeyIsSet) {
  RendezvousStore store;
  store.AdvanceEpoch(1);
  std::thread setter([&] {
    // Set from another thread while the main thread waits.
    ASSERT_TRUE(store.Set(1, "b", "vb", false).ok());
    ASSERT_TRUE(store.Set(1, "a", "va", false).ok());
  });
  auto values = store.Wait(1, {"a", "b"}, MonoNow() + absl::Seconds(30));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"va", "vb"}));
}

TEST(RendezvousStoreTest, WaitTimesOutNamingTheMissingKeys) {
  RendezvousStore store;
  store.AdvanceEpoch(1);
  ASSERT_TRUE(store.Set(1, "a", "va", false).ok());
  auto values = store.Wait(1, {"a", "b"}, MonoNow() + absl::Milliseconds(50));
  ASSERT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(values.status().message().find("\"b\""), std::string::npos);
  EXPECT_EQ(values.status().message().find("\"a\""), std::string::npos);
}

TEST(RendezvousStoreTest, NewEpochAbortsWaitersOfTheOldOne) {
  RendezvousStore store;
  store.AdvanceEpoch(1);
  absl::StatusOr<std::vector<std::string>> result;
  std::thread waiter([&] {
    result = store.Wait(1, {"never"}, MonoNow() + absl::Seconds(60));
  });
  store.AdvanceEpoch(2);
  waiter.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kAborted);
}

TEST(RendezvousStoreTest, ShutdownCancelsWaiters) {
  RendezvousStore store;
  store.AdvanceEpoch(1);
  absl::StatusOr<std::vector<std::string>> result;
  std::thread waiter([&] {
    result = store.Wait(1, {"never"}, MonoNow() + absl::Seconds(60));
  });
  store.Shutdown();
  waiter.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace shardd::coordinator
