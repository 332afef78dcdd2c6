#include "daemon/coordinator/rendezvous_policy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

constexpr int kWorld = 4;

RendezvousCaller Member(int rank) { return {true, rank}; }

absl::Status Check(RendezvousAccess access, const RendezvousCaller& caller,
                   std::vector<std::string> keys) {
  return AuthorizeRendezvous(access, caller, keys, kWorld);
}

bool Names(const absl::Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

TEST(RendezvousPolicyTest, AMemberWritesItsOwnKeysInEveryKeyspace) {
  for (const char* key :
       {"model/2", "gloo/2/epoch/5/shard/1/0", "gloo/2/epoch/5/shard/1/rank_0",
        "nccl/2/epoch/5/replica.0/id"}) {
    EXPECT_TRUE(Check(RendezvousAccess::kSet, Member(2), {key}).ok()) << key;
  }
}

TEST(RendezvousPolicyTest, AMemberWritingAnotherRanksKeyIsPermissionDenied) {
  for (const char* key :
       {"model/0", "gloo/3/epoch/5/shard/1/1", "nccl/0/epoch/5/shard.0/id"}) {
    const absl::Status s = Check(RendezvousAccess::kSet, Member(2), {key});
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << key << s;
    EXPECT_TRUE(Names(s, "a member writes only its own rank's keys")) << s;
    EXPECT_TRUE(Names(s, "rank 2 may not write key")) << s;
  }
}

TEST(RendezvousPolicyTest, AMemberReadsAndWaitsForAnyRanksKeys) {
  const std::vector<std::string> keys = {"model/0", "model/1", "model/2",
                                         "model/3"};
  EXPECT_TRUE(Check(RendezvousAccess::kWait, Member(1), keys).ok());
  EXPECT_TRUE(
      Check(RendezvousAccess::kGet, Member(1), {"gloo/3/epoch/1/world/0"})
          .ok());
}

TEST(RendezvousPolicyTest, NoTokenOrAnUnknownTokenIsUnauthenticatedForAll) {
  for (RendezvousAccess access :
       {RendezvousAccess::kSet, RendezvousAccess::kGet,
        RendezvousAccess::kWait}) {
    const absl::Status none = Check(access, {false, std::nullopt}, {"model/0"});
    EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated) << none;
    EXPECT_TRUE(Names(none, "lease_token is required")) << none;
    const absl::Status unknown =
        Check(access, {true, std::nullopt}, {"model/0"});
    EXPECT_EQ(unknown.code(), absl::StatusCode::kUnauthenticated) << unknown;
    EXPECT_TRUE(Names(unknown, "no live member holds this lease_token"))
        << unknown;
    EXPECT_TRUE(Names(unknown, "only live members")) << unknown;
  }
}

TEST(RendezvousPolicyTest, TheCallerIsCheckedBeforeTheKeys) {
  // A stranger learns nothing about the key grammar.
  const absl::Status s =
      Check(RendezvousAccess::kSet, {true, std::nullopt}, {"attacker/probe"});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
}

TEST(RendezvousPolicyTest, KeysNoRankOwnsAreInvalidArgumentForEveryAccess) {
  for (RendezvousAccess access :
       {RendezvousAccess::kSet, RendezvousAccess::kGet,
        RendezvousAccess::kWait}) {
    for (const char* key :
         {"attacker/probe", "shard/0/0", "epoch/1/world/0", "model/x", ""}) {
      const absl::Status s = Check(access, Member(0), {key});
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key << s;
      EXPECT_TRUE(Names(s, "<keyspace>/<owner rank>")) << s;
    }
  }
}

TEST(RendezvousPolicyTest, AnOwnerOutsideTheJobIsInvalidArgument) {
  const absl::Status s = Check(RendezvousAccess::kGet, Member(0), {"model/4"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Names(s, "every key belongs to a rank of the job")) << s;
}

TEST(RendezvousPolicyTest, OneBadKeyAmongManyRefusesTheWholeWait) {
  const absl::Status s = Check(RendezvousAccess::kWait, Member(0),
                               {"model/0", "model/1", "bogus"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(Check(RendezvousAccess::kWait, Member(0), {}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::coordinator
