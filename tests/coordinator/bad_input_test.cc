// Bad input over the wire to a real coordinator process: each request gets
// a clear status and changes nothing (invariant 3).
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/coordinator/process_cluster.h"
#include "tests/coordinator/test_main.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;

// The parts of the cluster state a rejected request must not change (lease
// expiry moves with heartbeats; there are none here, but it is not compared).
std::string Essence(const pb::ClusterState& s) {
  std::string out = absl::StrCat("epoch=", s.epoch(), " ready=", s.ready(),
                                 " step=", s.committed_step(),
                                 " decisions=", s.decisions_size(), ";");
  for (const pb::SlotState& slot : s.slots()) {
    absl::StrAppend(&out, " [", slot.rank(), " ",
                    pb::MemberState_Name(slot.state()), " ",
                    slot.member().identity(), " ", slot.member().peer_address(),
                    " ", slot.member().incarnation(), "]");
  }
  return out;
}

class BadInputTest : public ::testing::Test {
 protected:
  BadInputTest()
      // A long lease: the hand-made member below sends no heartbeats.
      : cluster_({TestBinaries().coordinator, TestBinaries().member, 4, 2,
                  60000, 20000}) {}

  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator().ok());
    pb::JoinRequest join;
    join.set_rank(0);
    join.set_identity("node-0");
    join.set_peer_address("127.0.0.1:1");
    join.set_incarnation("inc-0");
    join.set_join_secret("secret-0");
    pb::JoinResponse response;
    ASSERT_TRUE(Call([&](grpc::ClientContext* c) {
                  return cluster_.stub().Join(c, join, &response);
                }).ok());
    token_ = response.lease_token();
    epoch_ = response.epoch();
    auto s = cluster_.State();
    ASSERT_TRUE(s.ok());
    before_ = Essence(*s);
  }

  template <typename F>
  grpc::Status Call(F f) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return f(&context);
  }

  // Rendezvous calls as rank 0's member (token_) in the current epoch.
  grpc::Status Set(const std::string& key, const std::string& value) {
    pb::RendezvousSetRequest set;
    set.set_epoch(epoch_);
    set.set_key(key);
    set.set_value(value);
    set.set_lease_token(token_);
    pb::RendezvousSetResponse response;
    return Call([&](grpc::ClientContext* c) {
      return cluster_.stub().RendezvousSet(c, set, &response);
    });
  }
  grpc::Status Get(const std::string& key, std::string* value = nullptr) {
    pb::RendezvousGetRequest get;
    get.set_epoch(epoch_);
    get.set_key(key);
    get.set_lease_token(token_);
    pb::RendezvousGetResponse response;
    grpc::Status s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().RendezvousGet(c, get, &response);
    });
    if (value != nullptr) *value = response.value();
    return s;
  }

  void ExpectUnchanged(absl::string_view after_what) {
    auto s = cluster_.State();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(Essence(*s), before_) << "changed by " << after_what;
  }

  ProcessCluster cluster_;
  std::string token_;
  int64_t epoch_ = 0;
  std::string before_;
};

TEST_F(BadInputTest, SecondIdentityClaimingAHeldSlotIsAlreadyExists) {
  pb::JoinRequest join;
  join.set_rank(0);
  join.set_identity("intruder");
  join.set_peer_address("127.0.0.1:2");
  join.set_incarnation("inc-x");
  pb::JoinResponse response;
  const grpc::Status s = Call([&](grpc::ClientContext* c) {
    return cluster_.stub().Join(c, join, &response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "slot 0"))
      << s.error_message();
  ExpectUnchanged("duplicate slot");
}

TEST_F(BadInputTest, MalformedPeerAddressIsInvalidArgumentNamingTheField) {
  for (const char* address : {"no-port", "127.0.0.1:99999", ":80", ""}) {
    pb::JoinRequest join;
    join.set_rank(1);
    join.set_identity("node-1");
    join.set_peer_address(address);
    pb::JoinResponse response;
    const grpc::Status s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().Join(c, join, &response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << address;
    EXPECT_TRUE(absl::StrContains(s.error_message(), "peer_address"))
        << address << ": " << s.error_message();
    ExpectUnchanged(absl::StrCat("peer_address '", address, "'"));
  }
}

TEST_F(BadInputTest, RankOutOfRangeIsInvalidArgument) {
  pb::JoinRequest join;
  join.set_rank(4);
  join.set_identity("node-4");
  join.set_peer_address("127.0.0.1:4");
  pb::JoinResponse response;
  const grpc::Status s = Call([&](grpc::ClientContext* c) {
    return cluster_.stub().Join(c, join, &response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "rank"));
  ExpectUnchanged("rank out of range");
}

TEST_F(BadInputTest, ScopedWatchOfARankTheJobDoesNotHaveIsInvalidArgument) {
  for (int rank : {4, -2}) {
    pb::WatchMembershipRequest watch;
    watch.set_rank(rank);
    watch.set_scoped(true);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    auto reader = cluster_.stub().WatchMembership(&context, watch);
    pb::MembershipUpdate update;
    EXPECT_FALSE(reader->Read(&update)) << rank;
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << rank;
    EXPECT_TRUE(
        absl::StrContains(s.error_message(), absl::StrCat("rank ", rank)))
        << s.error_message();
  }
  ExpectUnchanged("scoped watch of a rank out of range");
}

TEST_F(BadInputTest, HeartbeatForAnUnknownSlotOrTokenIsNotFound) {
  struct Case {
    int rank;
    std::string token;
  };
  for (const Case& c :
       {Case{3, "no-such-token"}, Case{0, "wrong-token"}, Case{0, ""}}) {
    pb::HeartbeatRequest hb;
    hb.set_rank(c.rank);
    hb.set_lease_token(c.token);
    hb.set_epoch(epoch_);
    hb.set_state(pb::MEMBER_STATE_READY);
    pb::HeartbeatResponse response;
    const grpc::Status s = Call([&](grpc::ClientContext* ctx) {
      return cluster_.stub().Heartbeat(ctx, hb, &response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND)
        << c.rank << " " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "Join again"))
        << s.error_message();
    ExpectUnchanged(absl::StrCat("heartbeat rank ", c.rank));
  }
}

TEST_F(BadInputTest, HeartbeatOutOfRangeRankIsNotFoundAndChangesNothing) {
  pb::HeartbeatRequest hb;
  hb.set_rank(77);
  hb.set_lease_token(token_);
  hb.set_epoch(epoch_);
  hb.set_state(pb::MEMBER_STATE_READY);
  pb::HeartbeatResponse response;
  const grpc::Status s = Call([&](grpc::ClientContext* ctx) {
    return cluster_.stub().Heartbeat(ctx, hb, &response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  ExpectUnchanged("heartbeat rank 77");
}

TEST_F(BadInputTest, StaleEpochRendezvousIsAborted) {
  ASSERT_GE(epoch_, 1);
  pb::RendezvousSetRequest set;
  set.set_epoch(epoch_ - 1);
  set.set_key("model/0");
  set.set_value("v");
  set.set_lease_token(token_);
  pb::RendezvousSetResponse set_response;
  grpc::Status s = Call([&](grpc::ClientContext* c) {
    return cluster_.stub().RendezvousSet(c, set, &set_response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  ExpectUnchanged("stale RendezvousSet");

  pb::RendezvousWaitRequest wait;
  wait.set_epoch(epoch_ - 1);
  wait.add_keys("model/0");
  wait.set_lease_token(token_);
  pb::RendezvousWaitResponse wait_response;
  s = Call([&](grpc::ClientContext* c) {
    return cluster_.stub().RendezvousWait(c, wait, &wait_response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  ExpectUnchanged("stale RendezvousWait");

  // The current epoch still works, and holds nothing from the stale calls.
  EXPECT_EQ(Get("model/0").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(BadInputTest, RendezvousWithoutALiveMembersTokenIsUnauthenticated) {
  for (const std::string token : {"", "forged-token", "0000000000000000-1"}) {
    pb::RendezvousSetRequest set;
    set.set_epoch(epoch_);
    set.set_key("model/0");
    set.set_value("evil");
    set.set_lease_token(token);
    pb::RendezvousSetResponse set_response;
    grpc::Status s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().RendezvousSet(c, set, &set_response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "'" << token << "': " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "only live members"))
        << s.error_message();

    pb::RendezvousGetRequest get;
    get.set_epoch(epoch_);
    get.set_key("model/0");
    get.set_lease_token(token);
    pb::RendezvousGetResponse get_response;
    s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().RendezvousGet(c, get, &get_response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();

    pb::RendezvousWaitRequest wait;
    wait.set_epoch(epoch_);
    wait.add_keys("model/0");
    wait.set_lease_token(token);
    pb::RendezvousWaitResponse wait_response;
    s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().RendezvousWait(c, wait, &wait_response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
  ExpectUnchanged("unauthenticated rendezvous");
  EXPECT_EQ(Get("model/0").error_code(), grpc::StatusCode::NOT_FOUND)
      << "a refused write left its value behind";
}

TEST_F(BadInputTest, RendezvousWriteOfAnotherRanksKeyIsPermissionDenied) {
  // token_ is rank 0's.
  for (const char* key : {"model/1", "gloo/3/epoch/1/shard/1/rank_1",
                          "nccl/2/epoch/1/shard.1/id"}) {
    const grpc::Status s = Set(key, "evil");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << key << ": " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(),
                                  "a member writes only its own rank's keys"))
        << s.error_message();
    EXPECT_EQ(Get(key).error_code(), grpc::StatusCode::NOT_FOUND) << key;
  }
  ExpectUnchanged("another rank's key");
}

TEST_F(BadInputTest, RendezvousKeyNoRankOwnsIsInvalidArgument) {
  for (const char* key : {"attacker/probe", "shard/0/0", "model/99", "model"}) {
    const grpc::Status s = Set(key, "evil");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << key << ": " << s.error_message();
  }
  ExpectUnchanged("keys outside the grammar");
}

TEST_F(BadInputTest, GlooAndNcclKeysKeepTheirFirstValueInAnEpoch) {
  const std::string gloo = absl::StrCat("gloo/0/epoch/", epoch_, "/world/0");
  const std::string nccl = absl::StrCat("nccl/0/epoch/", epoch_, "/world/id");
  for (const std::string& key : {gloo, nccl}) {
    ASSERT_TRUE(Set(key, "first").ok());
    EXPECT_TRUE(Set(key, "first").ok()) << "a retry is a no-op";
    const grpc::Status s = Set(key, "second");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS)
        << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "keeps its value"))
        << s.error_message();
    std::string value;
    ASSERT_TRUE(Get(key, &value).ok());
    EXPECT_EQ(value, "first");
  }
}

TEST_F(BadInputTest, ItsOwnerMayRegisterItsModelKeyAgain) {
  ASSERT_TRUE(Set("model/0", "first").ok());
  ASSERT_TRUE(Set("model/0", "second").ok());
  std::string value;
  ASSERT_TRUE(Get("model/0", &value).ok());
  EXPECT_EQ(value, "second");
}

TEST_F(BadInputTest, RepeatedJoinWithoutTheProcessSecretIsPermissionDenied) {
  // Identity and incarnation are public (GetClusterState shows them); a
  // Join with them must not hand out the member's lease token.
  for (const std::string secret : {"", "guess"}) {
    pb::JoinRequest join;
    join.set_rank(0);
    join.set_identity("node-0");
    join.set_peer_address("127.0.0.1:1");
    join.set_incarnation("inc-0");
    join.set_join_secret(secret);
    pb::JoinResponse response;
    const grpc::Status s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().Join(c, join, &response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << "'" << secret << "': " << s.error_message();
    EXPECT_TRUE(absl::StrContains(s.error_message(), "join_secret"))
        << s.error_message();
    EXPECT_FALSE(absl::StrContains(s.error_message(), token_));
    EXPECT_EQ(response.lease_token(), "");
    ExpectUnchanged(absl::StrCat("join with secret '", secret, "'"));
  }
  // The process itself (its secret) gets its token back, changing nothing.
  pb::JoinRequest join;
  join.set_rank(0);
  join.set_identity("node-0");
  join.set_peer_address("127.0.0.1:1");
  join.set_incarnation("inc-0");
  join.set_join_secret("secret-0");
  pb::JoinResponse response;
  ASSERT_TRUE(Call([&](grpc::ClientContext* c) {
                return cluster_.stub().Join(c, join, &response);
              }).ok());
  EXPECT_EQ(response.lease_token(), token_);
  ExpectUnchanged("retried join");
}

// The rules of proto/shardd/v1/coordinator.proto's "who may call what" for
// the calls a member makes as its rank: without the rank's lease token
// they are refused and change nothing.
TEST_F(BadInputTest,
       MemberCallsWithoutTheRanksTokenAreNotFoundAndChangeNothing) {
  for (const std::string token : {"", "forged-token"}) {
    pb::LeaveRequest leave;
    leave.set_rank(0);
    leave.set_lease_token(token);
    pb::LeaveResponse leave_response;
    grpc::Status s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().Leave(c, leave, &leave_response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    ExpectUnchanged(absl::StrCat("Leave with token '", token, "'"));

    pb::ReportFailureRequest report;
    report.set_reporter_rank(0);
    report.set_lease_token(token);
    report.set_epoch(epoch_);
    report.set_suspect_rank(-1);
    report.set_kind(pb::FAILURE_KIND_COLLECTIVE_FAILED);
    pb::ReportFailureResponse report_response;
    s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().ReportFailure(c, report, &report_response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    ExpectUnchanged(absl::StrCat("ReportFailure with token '", token, "'"));

    pb::ShouldCommitRequest vote;
    vote.set_rank(0);
    vote.set_lease_token(token);
    vote.set_epoch(epoch_);
    vote.set_step(1);
    vote.set_vote(true);
    pb::ShouldCommitResponse vote_response;
    s = Call([&](grpc::ClientContext* c) {
      return cluster_.stub().ShouldCommit(c, vote, &vote_response);
    });
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    ExpectUnchanged(absl::StrCat("ShouldCommit with token '", token, "'"));
  }
  // Rank 0's token does not act for rank 1 either (an empty slot: Leave is
  // a no-op, a report from it is NOT_FOUND).
  pb::ReportFailureRequest report;
  report.set_reporter_rank(1);
  report.set_lease_token(token_);
  report.set_epoch(epoch_);
  report.set_suspect_rank(0);
  report.set_kind(pb::FAILURE_KIND_COLLECTIVE_FAILED);
  pb::ReportFailureResponse report_response;
  const grpc::Status s = Call([&](grpc::ClientContext* c) {
    return cluster_.stub().ReportFailure(c, report, &report_response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  pb::LeaveRequest leave;
  leave.set_rank(1);
  pb::LeaveResponse leave_response;
  EXPECT_TRUE(Call([&](grpc::ClientContext* c) {
                return cluster_.stub().Leave(c, leave, &leave_response);
              }).ok());
  ExpectUnchanged("rank 0's token acting for rank 1");
}

TEST_F(BadInputTest, HeartbeatWithAnInvalidStateIsInvalidArgument) {
  pb::HeartbeatRequest hb;
  hb.set_rank(0);
  hb.set_lease_token(token_);
  hb.set_epoch(epoch_);
  hb.set_state(pb::MEMBER_STATE_FAILED);
  pb::HeartbeatResponse response;
  const grpc::Status s = Call([&](grpc::ClientContext* ctx) {
    return cluster_.stub().Heartbeat(ctx, hb, &response);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectUnchanged("heartbeat state FAILED");
}

}  // namespace
}  // namespace shardd::tests
