#include "daemon/comm/coordinator_store/coordinator_store.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
  static constexpr int kWorld = 4;

  void SetUp() override {
    InProcessCoordinatorOptions o;
    o.coordinator.membership.world_size = kWorld;
    o.coordinator.membership.sharding_factor = 2;
    auto c = InProcessCoordinator::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = *std::move(c);
    // Only members use the store: every rank joins, and each store below
    // carries one member's lease token.
    for (int r = 0; r < kWorld; ++r) {
      coordinator::JoinRequestInfo join;
      join.rank = r;
      join.identity = absl::StrCat("node-", r);
      join.peer_address = absl::StrCat("127.0.0.1:", 7001 + r);
      join.incarnation = absl::StrCat("inc-", r);
      auto out = coordinator_->manager().Join(join);
      ASSERT_TRUE(out.ok()) << out.status();
      tokens_.push_back(out->lease_token);
      epoch_ = out->epoch;
    }
  }

  // The store of `rank`'s member in `epoch`.
  std::unique_ptr<CoordinatorStore> StoreFor(int64_t epoch, int rank = 0) {
    CoordinatorStoreOptions o;
    o.rank = rank;
    o.lease_token = tokens_[rank];
    return CoordinatorStore::Connect(coordinator_->address(), epoch, o);
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::vector<std::string> tokens_;
  int64_t epoch_ = 0;
};

TEST_F(CoordinatorStoreTest, SetThenGetReturnsTheValueBytes) {
  auto store = StoreFor(epoch_);
  const std::string value("a\0b\xff", 4);
  ASSERT_TRUE(store->Set("gloo/0/world/rank_0", value).ok());
  auto got = StoreFor(epoch_, 3)->Get("gloo/0/world/rank_0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  // A retry with the same value is accepted; another value is not (keys
  // are write-once per epoch), and the first value stays.
  EXPECT_TRUE(store->Set("gloo/0/world/rank_0", value).ok());
  const absl::Status second = store->Set("gloo/0/world/rank_0", "second");
  EXPECT_EQ(second.code(), absl::StatusCode::kAlreadyExists) << second;
  EXPECT_EQ(*store->Get("gloo/0/world/rank_0"), value);
}

TEST_F(CoordinatorStoreTest, AMemberWritingAnotherRanksKeyIsPermissionDenied) {
  auto rank1 = StoreFor(epoch_, 1);
  for (const char* key :
       {"model/0", "gloo/2/epoch/4/shard/1/0", "nccl/0/epoch/4/shard.0/id"}) {
    const absl::Status s = rank1->Set(key, "evil");
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << key << s;
    EXPECT_NE(s.message().find("a member writes only its own rank's keys"),
              std::string::npos)
        << s;
    EXPECT_EQ(rank1->Get(key).status().code(), absl::StatusCode::kNotFound)
        << key << ": the refused write left nothing behind";
  }
  // Its own key is fine, and every member reads it.
  ASSERT_TRUE(rank1->Set("model/1", "spec").ok());
  EXPECT_EQ(*StoreFor(epoch_, 0)->Get("model/1"), "spec");
}

TEST_F(CoordinatorStoreTest, AStoreWithoutAValidLeaseTokenIsUnauthenticated) {
  for (const std::string& token : {std::string(), std::string("forged")}) {
    CoordinatorStoreOptions o;
    o.lease_token = token;
    auto store = CoordinatorStore::Connect(coordinator_->address(), epoch_, o);
    EXPECT_EQ(store->Set("model/0", "evil").code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(store->Get("model/0").status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(store->Wait({"model/0"}, absl::Seconds(5)).code(),
              absl::StatusCode::kUnauthenticated);
  }
}

TEST_F(CoordinatorStoreTest, GetOfAMissingKeyIsNotFoundNamingTheKey) {
  auto got = StoreFor(epoch_)->Get("gloo/0/missing-key");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("gloo/0/missing-key"),
            std::string::npos)
      << got.status();
}

TEST_F(CoordinatorStoreTest, WaitReturnsOnceAnotherClientSetsTheKeys) {
  auto waiter = StoreFor(epoch_, 1);
  auto setter = StoreFor(epoch_);
  ASSERT_TRUE(setter->Set("gloo/0/a", "1").ok());
  absl::Notification started;
  absl::Status waited = absl::UnknownError("not run");
  std::thread t([&] {
    started.Notify();
    waited = waiter->Wait({"gloo/0/a", "gloo/0/b"}, absl::Seconds(10));
  });
  started.WaitForNotification();
  ASSERT_TRUE(setter->Set("gloo/0/b", "2").ok());
  t.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST_F(CoordinatorStoreTest, WaitForAnUnsetKeyTimesOutAtItsTimeout) {
  auto store = StoreFor(epoch_);
  const MonoTime start = MonoNow();
  const absl::Status s = store->Wait({"gloo/2/never"}, absl::Milliseconds(300));
  const absl::Duration took = MonoNow() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("gloo/2/never"), std::string::npos) << s;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST_F(CoordinatorStoreTest, StaleEpochIsAbortedForEveryCall) {
  auto old_store = StoreFor(epoch_ - 1);
  EXPECT_EQ(old_store->Set("model/0", "v").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(old_store->Get("model/0").status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(old_store->Wait({"model/0"}, absl::Seconds(5)).code(),
            absl::StatusCode::kAborted);
}

TEST_F(CoordinatorStoreTest, FutureEpochIsFailedPrecondition) {
  EXPECT_EQ(StoreFor(epoch_ + 1)->Set("model/0", "v").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorStoreTest, NewEpochAbortsAWaitAndDropsTheOldKeys) {
  auto store = StoreFor(epoch_);
  ASSERT_TRUE(store->Set("gloo/0/old", "v").ok());
  absl::Status waited = absl::UnknownError("not run");
  absl::Notification started;
  std::thread t([&] {
    started.Notify();
    waited = store->Wait({"gloo/2/never"}, absl::Seconds(20));
  });
  started.WaitForNotification();
  // The wait may not have reached the server yet; Advance aborts it either
  // way (a late arrival finds its epoch stale).
  coordinator_->manager().rendezvous().AdvanceEpoch(epoch_ + 1);
  t.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kAborted) << waited;
  EXPECT_EQ(StoreFor(epoch_ + 1)->Get("gloo/0/old").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorStoreTest, InvalidKeyKeepsTheCoordinatorsCode) {
  for (const char* key : {"", "attacker/probe", "shard/0/0", "model/9"}) {
    EXPECT_EQ(StoreFor(epoch_)->Set(key, "v").code(),
              absl::StatusCode::kInvalidArgument)
        << key;
  }
}

TEST_F(CoordinatorStoreTest, UnreachableCoordinatorIsUnavailable) {
  coordinator_->Stop();
  CoordinatorStoreOptions o;
  o.rpc_timeout = absl::Seconds(2);
  auto store = CoordinatorStore::Connect("127.0.0.1:1", 3, o);
  const absl::Status s = store->Set("model/0", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace shardd::comm
