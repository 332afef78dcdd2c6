#include "daemon/comm/coordinator_store/coordinator_store.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

using coordinator::InProcessCoordinator;
using coordinator::InProcessCoordinatorOptions;

class CoordinatorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcessCoordinatorOptions o;
    o.coordinator.membership.world_size = 4;
    o.coordinator.membership.sharding_factor = 2;
    auto c = InProcessCoordinator::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
    coordinator_->manager().rendezvous().AdvanceEpoch(3);
  }

  std::unique_ptr<CoordinatorStore> StoreFor(int64_t epoch) {
    return CoordinatorStore::Connect(coordinator_->address(), epoch);
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
};

TEST_F(CoordinatorStoreTest, SetThenGetReturnsTheValueBytes) {
  auto store = StoreFor(3);
  const std::string value("a\0b\xff", 4);
  ASSERT_TRUE(store->Set("gloo/world/rank0", value).ok());
  auto got = store->Get("gloo/world/rank0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  // Overwriting is allowed (Store::Set semantics).
  ASSERT_TRUE(store->Set("gloo/world/rank0", "second").ok());
  EXPECT_EQ(*store->Get("gloo/world/rank0"), "second");
}

TEST_F(CoordinatorStoreTest, GetOfAMissingKeyIsNotFoundNamingTheKey) {
  auto got = StoreFor(3)->Get("missing-key");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("missing-key"), std::string::npos)
      << got.status();
}

TEST_F(CoordinatorStoreTest, WaitReturnsOnceAnotherClientSetsTheKeys) {
  auto waiter = StoreFor(3);
  auto setter = StoreFor(3);
  ASSERT_TRUE(setter->Set("a", "1").ok());
  absl::Notification started;
  absl::Status waited = absl::UnknownError("not run");
  std::thread t([&] {
    started.Notify();
    waited = waiter->Wait({"a", "b"}, absl::Seconds(10));
  });
  started.WaitForNotification();
  ASSERT_TRUE(setter->Set("b", "2").ok());
  t.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST_F(CoordinatorStoreTest, WaitForAnUnsetKeyTimesOutAtItsTimeout) {
  auto store = StoreFor(3);
  const MonoTime start = MonoNow();
  const absl::Status s = store->Wait({"never"}, absl::Milliseconds(300));
  const absl::Duration took = MonoNow() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("never"), std::string::npos) << s;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST_F(CoordinatorStoreTest, StaleEpochIsAbortedForEveryCall) {
  auto old_store = StoreFor(2);
  EXPECT_EQ(old_store->Set("k", "v").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(old_store->Get("k").status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(old_store->Wait({"k"}, absl::Seconds(5)).code(),
            absl::StatusCode::kAborted);
}

TEST_F(CoordinatorStoreTest, FutureEpochIsFailedPrecondition) {
  EXPECT_EQ(StoreFor(4)->Set("k", "v").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorStoreTest, NewEpochAbortsAWaitAndDropsTheOldKeys) {
  auto store = StoreFor(3);
  ASSERT_TRUE(store->Set("old", "v").ok());
  absl::Status waited = absl::UnknownError("not run");
  absl::Notification started;
  std::thread t([&] {
    started.Notify();
    waited = store->Wait({"never"}, absl::Seconds(20));
  });
  started.WaitForNotification();
  // The wait may not have reached the server yet; Advance aborts it either
  // way (a late arrival finds its epoch stale).
  coordinator_->manager().rendezvous().AdvanceEpoch(4);
  t.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_EQ(StoreFor(4)->Get("old").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorStoreTest, InvalidKeyKeepsTheCoordinatorsCode) {
  EXPECT_EQ(StoreFor(3)->Set("", "v").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorStoreTest, UnreachableCoordinatorIsUnavailable) {
  coordinator_->Stop();
  CoordinatorStoreOptions o;
  o.rpc_timeout = absl::Seconds(2);
  auto store = CoordinatorStore::Connect("127.0.0.1:1", 3, o);
  const absl::Status s = store->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace shardd::comm
