#include "daemon/coordinator/scoped_update_stream.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/core/manual_clock.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

namespace pb = ::shardd::v1;

// W = 16, F = 4: rank 5's scope is its shard group {4..7} and its replica
// group {1, 5, 9, 13}.
constexpr int kWorld = 16;
constexpr int kFactor = 4;

class ScopedUpdateStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.membership.world_size = kWorld;
    options.membership.sharding_factor = kFactor;
    options.membership.detector.lease = absl::Milliseconds(1500);
    auto m = CoordinatorManager::Create(options,
                                        std::make_unique<ManualClock>(), {});
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = *std::move(m);
  }

  JoinOutcome Join(int r, const std::string& incarnation = "i1") {
    JoinRequestInfo req;
    req.rank = r;
    req.identity = absl::StrCat("pod-", r);
    req.peer_address = absl::StrCat("127.0.0.1:", 9000 + r);
    req.incarnation = incarnation;
    req.join_secret = absl::StrCat("s-", r, incarnation);
    auto out = manager_->Join(req);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : JoinOutcome{};
  }

  static std::vector<int> Ranks(const pb::MembershipUpdate& u) {
    std::vector<int> r;
    for (const pb::MemberInfo& m : u.members()) r.push_back(m.rank());
    return r;
  }

  std::unique_ptr<CoordinatorManager> manager_;
};

TEST(ScopedUpdateStreamRankTest, RejectsARankTheJobDoesNotHave) {
  EXPECT_TRUE(ScopedUpdateStream::CheckRank(-1, 8).ok());
  EXPECT_TRUE(ScopedUpdateStream::CheckRank(0, 8).ok());
  EXPECT_TRUE(ScopedUpdateStream::CheckRank(7, 8).ok());
  for (int bad : {8, 1 << 30, -2}) {
    const absl::Status s = ScopedUpdateStream::CheckRank(bad, 8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(absl::StrCat("rank ", bad)), std::string::npos)
        << s;
  }
}

TEST_F(ScopedUpdateStreamTest, FirstMessageListsTheShardAndReplicaGroups) {
  for (int r = 0; r < kWorld; ++r) Join(r);
  ScopedUpdateStream stream(5);
  std::optional<pb::MembershipUpdate> u =
      stream.Next(*manager_->ChangesSince(-1));
  ASSERT_TRUE(u.has_value());
  EXPECT_FALSE(u->delta());
  EXPECT_EQ(Ranks(*u), (std::vector<int>{1, 4, 5, 6, 7, 9, 13}));
  EXPECT_EQ(u->live_members(), kWorld);
  EXPECT_EQ(u->world_size(), kWorld);
}

TEST_F(ScopedUpdateStreamTest, ScopedSnapshotCopiesOnlyTheScope) {
  for (int r = 0; r < kWorld; ++r) Join(r);
  const std::shared_ptr<const MembershipChanges> c =
      manager_->ScopedSnapshot(5);
  std::vector<int> ranks;
  for (const SlotRecord& s : c->snapshot.slots) ranks.push_back(s.rank);
  EXPECT_EQ(ranks, (std::vector<int>{1, 4, 5, 6, 7, 9, 13}));
  EXPECT_TRUE(c->full);
  ScopedUpdateStream stream(5);
  std::optional<pb::MembershipUpdate> u = stream.Next(*c);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(Ranks(*u), (std::vector<int>{1, 4, 5, 6, 7, 9, 13}));
}

TEST_F(ScopedUpdateStreamTest, AToolStreamListsEveryone) {
  for (int r = 0; r < kWorld; ++r) Join(r);
  ScopedUpdateStream stream(-1);
  std::optional<pb::MembershipUpdate> u =
      stream.Next(*manager_->ChangesSince(-1));
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->members_size(), kWorld);
}

TEST_F(ScopedUpdateStreamTest, ALossInScopeIsADeltaOfOneRank) {
  std::vector<JoinOutcome> joined;
  for (int r = 0; r < kWorld; ++r) joined.push_back(Join(r));
  ScopedUpdateStream stream(5);
  ASSERT_TRUE(stream.Next(*manager_->ChangesSince(-1)).has_value());
  ASSERT_TRUE(manager_->Leave(9, joined[9].lease_token, "test").ok());
  std::optional<pb::MembershipUpdate> u =
      stream.Next(*manager_->ChangesSince(stream.seen()));
  ASSERT_TRUE(u.has_value());
  EXPECT_TRUE(u->delta());
  EXPECT_EQ(u->members_size(), 0);
  EXPECT_EQ(
      std::vector<int>(u->removed_ranks().begin(), u->removed_ranks().end()),
      std::vector<int>{9});
  EXPECT_EQ(u->live_members(), kWorld - 1);
  // Its replacement: the one member, nobody else.
  Join(9, "i2");
  u = stream.Next(*manager_->ChangesSince(stream.seen()));
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(Ranks(*u), std::vector<int>{9});
  EXPECT_EQ(u->members(0).incarnation(), "i2");
  EXPECT_EQ(u->removed_ranks_size(), 0);
}

TEST_F(ScopedUpdateStreamTest, ALossOutOfScopeSendsTheNewEpochWithoutMembers) {
  std::vector<JoinOutcome> joined;
  for (int r = 0; r < kWorld; ++r) joined.push_back(Join(r));
  ScopedUpdateStream stream(5);
  const std::optional<pb::MembershipUpdate> first =
      stream.Next(*manager_->ChangesSince(-1));
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(manager_->Leave(10, joined[10].lease_token, "test").ok());
  std::optional<pb::MembershipUpdate> u =
      stream.Next(*manager_->ChangesSince(stream.seen()));
  ASSERT_TRUE(u.has_value());  // The epoch moved.
  EXPECT_GT(u->epoch(), first->epoch());
  EXPECT_EQ(u->members_size(), 0);
  EXPECT_EQ(u->removed_ranks_size(), 0);
}

TEST_F(ScopedUpdateStreamTest, AFormingJoinOutOfScopeTellsTheStreamNothing) {
  Join(5);
  Join(0);
  ScopedUpdateStream stream(5);
  ASSERT_TRUE(stream.Next(*manager_->ChangesSince(-1)).has_value());
  Join(10);  // Joins the forming epoch: no new epoch, not in 5's scope.
  EXPECT_FALSE(stream.Next(*manager_->ChangesSince(stream.seen())).has_value());
  Join(6);  // In 5's shard group.
  std::optional<pb::MembershipUpdate> u =
      stream.Next(*manager_->ChangesSince(stream.seen()));
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(Ranks(*u), std::vector<int>{6});
}

TEST_F(ScopedUpdateStreamTest, AnotherMembersReadinessWakesNoScopedStream) {
  std::vector<JoinOutcome> joined;
  for (int r = 0; r < kWorld; ++r) joined.push_back(Join(r));
  const int64_t scoped =
      manager_->AwaitVersion(true, -1, MonoTime::InfinitePast()).scoped;
  const int64_t any =
      manager_->AwaitVersion(false, -1, MonoTime::InfinitePast()).any;
  ASSERT_TRUE(manager_
                  ->Heartbeat(3, joined[3].lease_token, joined.back().epoch, 0,
                              MemberPhase::kReady)
                  .ok());
  EXPECT_GT(manager_->AwaitVersion(false, -1, MonoTime::InfinitePast()).any,
            any);
  EXPECT_EQ(manager_->AwaitVersion(true, -1, MonoTime::InfinitePast()).scoped,
            scoped);
}

TEST_F(ScopedUpdateStreamTest, ThePlanCarriesOnlyThisMembersItems) {
  std::vector<JoinOutcome> joined;
  for (int r = 0; r < kWorld; ++r) {
    JoinRequestInfo req;
    req.rank = r;
    req.identity = absl::StrCat("pod-", r);
    req.peer_address = absl::StrCat("127.0.0.1:", 9000 + r);
    req.incarnation = "i1";
    req.holds_shard = true;
    req.last_committed_step = 3;
    auto out = manager_->Join(req);
    ASSERT_TRUE(out.ok());
    joined.push_back(*out);
  }
  // Ranks 5 and 10 are replaced by members without a shard: two copies.
  ASSERT_TRUE(manager_->Leave(5, joined[5].lease_token, "x").ok());
  ASSERT_TRUE(manager_->Leave(10, joined[10].lease_token, "x").ok());
  Join(5, "i2");
  Join(10, "i2");
  ScopedUpdateStream mine(5), other(6);
  std::optional<pb::MembershipUpdate> u =
      mine.Next(*manager_->ChangesSince(-1));
  ASSERT_TRUE(u.has_value());
  ASSERT_EQ(u->plan().transfers_size(), 1);
  EXPECT_EQ(u->plan().transfers(0).target_rank(), 5);
  u = other.Next(*manager_->ChangesSince(-1));
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->plan().transfers_size(), 0);
  EXPECT_EQ(u->plan().kind(), pb::EPOCH_PLAN_KIND_RESUME);
}

TEST_F(ScopedUpdateStreamTest, KeepaliveRepeatsTheHeaderWithoutMembers) {
  for (int r = 0; r < kWorld; ++r) Join(r);
  ScopedUpdateStream stream(5);
  const std::optional<pb::MembershipUpdate> first =
      stream.Next(*manager_->ChangesSince(-1));
  ASSERT_TRUE(first.has_value());
  const pb::MembershipUpdate k = stream.Keepalive();
  EXPECT_TRUE(k.keepalive());
  EXPECT_TRUE(k.delta());
  EXPECT_EQ(k.members_size(), 0);
  EXPECT_EQ(k.epoch(), first->epoch());
  EXPECT_EQ(k.plan().kind(), first->plan().kind());
}

}  // namespace
}  // namespace shardd::coordinator
