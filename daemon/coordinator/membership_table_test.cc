#include "daemon/coordinator/membership_table.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

const MonoTime kT0 = MonoTime::FromOrigin(absl::Seconds(2'000'000));
const absl::Duration kLease = absl::Milliseconds(1500);

class MembershipTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MembershipOptions options;
    options.world_size = 4;
    options.sharding_factor = 2;
    options.detector.lease = kLease;
    // Fewer than the default 20, for short tests of the rule.
    options.max_epochs_without_commit = 10;
    auto table = MembershipTable::Create(options);
    ASSERT_TRUE(table.ok());
    table_.emplace(*std::move(table));
  }

  static JoinRequestInfo Request(int rank, const std::string& identity) {
    JoinRequestInfo r;
    r.rank = rank;
    r.identity = identity;
    r.peer_address = absl::StrCat("127.0.0.1:", 7000 + rank + 1);
    r.incarnation = identity + "-inc1";
    r.join_secret = identity + "-secret";
    return r;
  }

  // The member of `rank` holding its shard at step 7 (a running job).
  static JoinRequestInfo Holder(int rank, const std::string& identity) {
    JoinRequestInfo r = Request(rank, identity);
    r.holds_shard = true;
    r.last_committed_step = 7;
    return r;
  }

  // Joins ranks 0..3 holding their shards at step 7 and makes every one
  // READY.
  void JoinAllReady(MonoTime now) {
    for (int r = 0; r < 4; ++r) {
      auto out = table_->Join(Holder(r, absl::StrCat("pod-", r)), now,
                              absl::StrCat("token-", r));
      ASSERT_TRUE(out.ok()) << out.status();
    }
    for (int r = 0; r < 4; ++r) ReadyHeartbeat(r, now);
  }

  // Both replicas of shard 0 (ranks 0 and 2) leave and fresh members take
  // their slots (tokens "t0b", "t2b").
  void ReplaceShardZero(MonoTime now) {
    for (int r : {0, 2}) {
      ASSERT_TRUE(
          table_->Leave(r, absl::StrCat("token-", r), "test", now).ok());
    }
    for (int r : {0, 2}) {
      ASSERT_TRUE(table_
                      ->Join(Request(r, absl::StrCat("pod-", r, "b")), now,
                             absl::StrCat("t", r, "b"))
                      .ok());
    }
  }

  void ReadyHeartbeat(int r, MonoTime now) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                7, MemberPhase::kReady, now)
                    .ok());
  }

  // Everything a rejected call must leave untouched.
  std::string Snapshot() const {
    std::string s =
        absl::StrCat(table_->epoch(), "/", table_->decisions().size(), "/");
    for (const SlotRecord& slot : table_->slots()) {
      absl::StrAppend(&s, MemberPhaseName(slot.phase), ":", slot.identity, ":",
                      slot.lease_token, ";");
    }
    return s;
  }

  std::optional<MembershipTable> table_;
};

TEST_F(MembershipTableTest, RejectsInvalidOptionsNamingTheField) {
  MembershipOptions o;
  o.world_size = 6;
  o.sharding_factor = 4;
  auto t = MembershipTable::Create(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("sharding_factor"), std::string::npos);
  o.world_size = 0;
  EXPECT_FALSE(MembershipTable::Create(o).ok());
}

TEST_F(MembershipTableTest, JoinAssignsSlotAndStartsTheFirstEpoch) {
  auto out = table_->Join(Request(2, "pod-2"), kT0, "token-2");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->rank, 2);
  EXPECT_EQ(out->epoch, 1);
  EXPECT_EQ(table_->slots()[2].phase, MemberPhase::kJoining);
  EXPECT_FALSE(out->recovery.has_value());  // Nothing to recover yet.
  auto any = table_->Join(Request(-1, "pod-x"), kT0, "token-x");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->rank, 0);  // Lowest empty slot.
}

TEST_F(MembershipTableTest, JoinsWhileFormingShareOneEpochUntilTheLastSlot) {
  for (int r = 0; r < 3; ++r) {
    auto out = table_->Join(Request(r, absl::StrCat("pod-", r)), kT0,
                            absl::StrCat("token-", r));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->epoch, 1) << "rank " << r;
    EXPECT_EQ(table_->plan().kind, PlanKind::kWait);
  }
  // The last slot: the epoch the job forms in, with its plan issued.
  auto last = table_->Join(Request(3, "pod-3"), kT0, "token-3");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->epoch, 2);
  EXPECT_EQ(table_->plan().kind, PlanKind::kNew);
  int started = 0;
  for (const Decision& d : table_->decisions()) {
    started += d.kind == DecisionKind::kEpochStarted ? 1 : 0;
  }
  EXPECT_EQ(started, 2);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), 2, 0,
                                MemberPhase::kReady, kT0)
                    .ok());
  }
  EXPECT_TRUE(table_->ready());
}

TEST_F(MembershipTableTest, JoinsAfterTheJobFormedEachStartAnEpoch) {
  JoinAllReady(kT0);
  ASSERT_TRUE(table_->ready());
  const int64_t formed = table_->epoch();
  ASSERT_TRUE(table_->Leave(1, "token-1", "scale down", kT0).ok());
  ASSERT_TRUE(table_->Leave(2, "token-2", "scale down", kT0).ok());
  EXPECT_EQ(table_->epoch(), formed + 2);
  auto a = table_->Join(Request(1, "pod-1b"), kT0, "token-1b");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->epoch, formed + 3);  // Not coalesced: the job was ready.
  auto b = table_->Join(Request(2, "pod-2b"), kT0, "token-2b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->epoch, formed + 4);
}

TEST_F(MembershipTableTest, FormingJoinStartsAnEpochAboveTheMembersLastOne) {
  // Re-joins after a coordinator restart: the epoch stays above what each
  // member last saw, so none mistakes it for one it already had.
  JoinRequestInfo first = Holder(0, "pod-0");
  first.last_epoch = 5;
  ASSERT_TRUE(table_->Join(first, kT0, "token-0").ok());
  EXPECT_EQ(table_->epoch(), 6);
  JoinRequestInfo same = Holder(1, "pod-1");
  same.last_epoch = 5;
  ASSERT_TRUE(table_->Join(same, kT0, "token-1").ok());
  EXPECT_EQ(table_->epoch(), 6);  // Coalesced.
  JoinRequestInfo newer = Holder(2, "pod-2");
  newer.last_epoch = 6;
  ASSERT_TRUE(table_->Join(newer, kT0, "token-2").ok());
  EXPECT_EQ(table_->epoch(), 7);
}

TEST_F(MembershipTableTest, FormingJoinThatReplacesALiveMemberStartsAnEpoch) {
  ASSERT_TRUE(table_->Join(Request(0, "pod-0"), kT0, "token-0").ok());
  ASSERT_TRUE(table_->Join(Request(1, "pod-1"), kT0, "token-1").ok());
  ASSERT_EQ(table_->epoch(), 1);
  JoinRequestInfo restarted = Request(1, "pod-1");
  restarted.incarnation = "pod-1-inc2";
  ASSERT_TRUE(table_->Join(restarted, kT0, "token-1b").ok());
  EXPECT_EQ(table_->epoch(), 2);
}

TEST_F(MembershipTableTest, DecisionsTotalCountsEveryDecisionEverLogged) {
  EXPECT_EQ(table_->decisions_total(), 0);
  JoinAllReady(kT0);
  EXPECT_GT(table_->decisions_total(), 0);
  EXPECT_EQ(table_->decisions_total(),
            static_cast<int64_t>(table_->decisions().size()));

  MembershipOptions small;
  small.world_size = 2;
  small.max_decisions = 3;
  auto t = MembershipTable::Create(small);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->Join(Request(0, "a"), kT0, "t0").ok());
  ASSERT_TRUE(t->Join(Request(1, "b"), kT0, "t1").ok());
  // Each join logs MEMBER_JOINED and EPOCH_STARTED; the deque keeps 3.
  EXPECT_EQ(t->decisions().size(), 3u);
  EXPECT_EQ(t->decisions_total(), 4);
}

TEST_F(MembershipTableTest, ReadyOnlyWhenAllSlotsReportReadyForTheEpoch) {
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(table_
                    ->Join(Holder(r, absl::StrCat("pod-", r)), kT0,
                           absl::StrCat("token-", r))
                    .ok());
  }
  for (int r = 0; r < 3; ++r) ReadyHeartbeat(r, kT0);
  EXPECT_FALSE(table_->ready());
  // A READY for an older epoch does not count.
  ASSERT_TRUE(table_
                  ->Heartbeat(3, "token-3", table_->epoch() - 1, 0,
                              MemberPhase::kReady, kT0)
                  .ok());
  EXPECT_FALSE(table_->ready());
  ReadyHeartbeat(3, kT0);
  EXPECT_TRUE(table_->ready());
  EXPECT_EQ(table_->decisions().back().kind, DecisionKind::kEpochReady);
}

TEST_F(MembershipTableTest, DuplicateSlotClaimIsRejectedAndChangesNothing) {
  ASSERT_TRUE(table_->Join(Request(1, "pod-1"), kT0, "token-1").ok());
  const std::string before = Snapshot();
  auto dup = table_->Join(Request(1, "pod-other"), kT0, "token-o");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("pod-1"), std::string::npos);
  // The same identity claiming a second slot.
  auto second = table_->Join(Request(3, "pod-1"), kT0, "token-z");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(MembershipTableTest, RetriedJoinOfTheSameProcessIsIdempotent) {
  auto first = table_->Join(Request(1, "pod-1"), kT0, "token-1");
  ASSERT_TRUE(first.ok());
  const std::string before = Snapshot();
  auto again = table_->Join(Request(1, "pod-1"), kT0, "token-new");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->lease_token, "token-1");
  EXPECT_EQ(again->epoch, first->epoch);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(MembershipTableTest,
       RepeatedJoinWithoutTheProcessSecretIsRefusedAndChangesNothing) {
  ASSERT_TRUE(table_->Join(Request(1, "pod-1"), kT0, "token-1").ok());
  const std::string before = Snapshot();
  for (const std::string secret : {"", "guess"}) {
    JoinRequestInfo impostor = Request(1, "pod-1");
    impostor.join_secret = secret;
    auto out = table_->Join(impostor, kT0, "token-x");
    EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied)
        << "'" << secret << "'";
    EXPECT_NE(out.status().message().find("join_secret"), std::string::npos)
        << out.status();
    EXPECT_EQ(out.status().message().find("token-1"), std::string::npos)
        << "the refusal shows the token: " << out.status();
    EXPECT_EQ(Snapshot(), before);
  }
  EXPECT_EQ(table_->LiveRankOf("token-1"), 1);
}

TEST_F(MembershipTableTest, LiveRankOfFindsOnlyLiveMembersTokens) {
  ASSERT_TRUE(table_->Join(Request(0, "pod-0"), kT0, "token-0").ok());
  ASSERT_TRUE(table_->Join(Request(2, "pod-2"), kT0, "token-2").ok());
  EXPECT_EQ(table_->LiveRankOf("token-0"), 0);
  EXPECT_EQ(table_->LiveRankOf("token-2"), 2);
  EXPECT_EQ(table_->LiveRankOf("token-1"), std::nullopt);
  EXPECT_EQ(table_->LiveRankOf(""), std::nullopt);
  ASSERT_TRUE(table_->Leave(2, "token-2", "done", kT0).ok());
  EXPECT_EQ(table_->LiveRankOf("token-2"), std::nullopt)
      << "a departed member's token is dead";
}

TEST_F(MembershipTableTest, RejectsMalformedJoinsNamingTheField) {
  const std::string before = Snapshot();
  JoinRequestInfo r = Request(0, "pod-0");
  r.identity = "";
  EXPECT_NE(table_->Join(r, kT0, "t").status().message().find("identity"),
            std::string::npos);
  r = Request(0, "pod-0");
  r.peer_address = "no-port";
  EXPECT_NE(table_->Join(r, kT0, "t").status().message().find("peer_address"),
            std::string::npos);
  r = Request(4, "pod-0");
  EXPECT_NE(table_->Join(r, kT0, "t").status().message().find("rank"),
            std::string::npos);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(MembershipTableTest, NoFreeSlotIsResourceExhausted) {
  JoinAllReady(kT0);
  auto fifth = table_->Join(Request(-1, "pod-4"), kT0, "token-4");
  EXPECT_EQ(fifth.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(MembershipTableTest, MissedLeaseRemovesMemberAndStartsEpoch) {
  JoinAllReady(kT0);
  const int64_t epoch = table_->epoch();
  // Ranks 0..2 keep heartbeating; rank 3 goes silent.
  const MonoTime later = kT0 + absl::Milliseconds(1000);
  for (int r = 0; r < 3; ++r) ReadyHeartbeat(r, later);
  EXPECT_TRUE(table_->ExpireLeases(kT0 + absl::Milliseconds(1499)).empty());
  EXPECT_EQ(table_->next_expiry(), kT0 + kLease);
  const auto removed = table_->ExpireLeases(kT0 + kLease);
  ASSERT_EQ(removed, std::vector<int>{3});
  EXPECT_EQ(table_->slots()[3].phase, MemberPhase::kFailed);
  EXPECT_EQ(table_->epoch(), epoch + 1);
  EXPECT_FALSE(table_->ready());
  bool logged = false;
  for (const Decision& d : table_->decisions()) {
    logged |= d.kind == DecisionKind::kMemberRemoved &&
              d.reason.find("lease expired") != std::string::npos;
  }
  EXPECT_TRUE(logged);
  // The removed member's heartbeats are refused: it must re-join.
  EXPECT_EQ(
      table_
          ->Heartbeat(3, "token-3", epoch, 7, MemberPhase::kReady, kT0 + kLease)
          .code(),
      absl::StatusCode::kNotFound);
}

TEST_F(MembershipTableTest, ReplacementTakesTheSlotAndCopiesFromAReplica) {
  JoinAllReady(kT0);
  const MonoTime t1 = kT0 + absl::Milliseconds(1000);
  for (int r : {0, 1, 2}) ReadyHeartbeat(r, t1);
  ASSERT_EQ(table_->ExpireLeases(kT0 + kLease), std::vector<int>{3});
  auto replacement = table_->Join(Request(-1, "pod-3b"), t1, "token-3b");
  ASSERT_TRUE(replacement.ok());
  EXPECT_EQ(replacement->rank, 3);  // The failed slot is reused.
  ASSERT_TRUE(replacement->recovery.has_value());
  EXPECT_EQ(replacement->recovery->shard_index, 1);
  EXPECT_EQ(replacement->recovery->source_ranks, std::vector<int>{1});
  EXPECT_EQ(replacement->recovery->step, 7);
  EXPECT_EQ(table_->slots()[3].phase, MemberPhase::kRecovering);
}

// A restarted daemon (same identity, new incarnation) takes its live slot
// at once when its predecessor does not answer the coordinator's probe, or
// was not probed.
TEST_F(MembershipTableTest, NewIncarnationReplacesALiveOneThatIsGone) {
  JoinAllReady(kT0);
  JoinRequestInfo again = Request(3, "pod-3");
  again.incarnation = "pod-3-inc2";
  EXPECT_EQ(table_->LiveHolderToReplace(again), "127.0.0.1:7004");
  const HolderProbe gone{"127.0.0.1:7004", ProbeResult::kUnreachable};
  auto out = table_->Join(again, kT0, "token-3b", gone);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->rank, 3);
  EXPECT_EQ(table_->slots()[3].incarnation, "pod-3-inc2");
  EXPECT_EQ(table_->slots()[3].lease_token, "token-3b");
  again.incarnation = "pod-3-inc3";
  ASSERT_TRUE(table_->Join(again, kT0, "token-3c").ok());  // Not probed.
  EXPECT_EQ(table_->slots()[3].incarnation, "pod-3-inc3");
}

// Two live processes with one identity would evict each other for good
// (each rejoins when replaced): while the slot's holder answers probes, the
// newcomer is refused, the refusal is logged, and nothing else changes.
TEST_F(MembershipTableTest, SecondLiveProcessWithAnIdentityIsRefused) {
  JoinAllReady(kT0);
  JoinRequestInfo twin = Request(-1, "pod-3");
  twin.incarnation = "pod-3-twin";
  twin.peer_address = "127.0.0.1:7999";
  ASSERT_EQ(table_->LiveHolderToReplace(twin), "127.0.0.1:7004");
  const std::string before = Snapshot();
  const HolderProbe alive{"127.0.0.1:7004", ProbeResult::kAlive};
  auto out = table_->Join(twin, kT0, "token-twin", alive);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kAlreadyExists)
      << out.status();
  EXPECT_NE(out.status().message().find("'pod-3' is live in slot 3"),
            std::string::npos)
      << out.status();
  EXPECT_NE(out.status().message().find("127.0.0.1:7999"), std::string::npos)
      << out.status();
  EXPECT_EQ(table_->slots()[3].lease_token, "token-3");
  EXPECT_TRUE(table_->ready());
  EXPECT_EQ(table_->decisions().back().kind, DecisionKind::kJoinRejected);
  // Only the decision log grew (Snapshot: "epoch/decisions/slots").
  const auto without_log = [](const std::string& snap) {
    const size_t first = snap.find('/');
    return snap.substr(0, first) + snap.substr(snap.find('/', first + 1));
  };
  EXPECT_EQ(without_log(Snapshot()), without_log(before));
  // A probe of another address (the slot changed hands meanwhile) does not
  // count, and the same process retrying is not a second one.
  const HolderProbe stale{"127.0.0.1:1234", ProbeResult::kAlive};
  EXPECT_TRUE(table_->Join(twin, kT0, "token-twin", stale).ok());
  EXPECT_EQ(table_->LiveHolderToReplace(twin), "");
}

TEST_F(MembershipTableTest, WithoutReplicaOrCheckpointTheJobFails) {
  MembershipOptions o;
  o.world_size = 2;
  o.sharding_factor = 2;
  o.detector.lease = kLease;
  auto table = MembershipTable::Create(o);
  ASSERT_TRUE(table.ok());
  for (int r = 0; r < 2; ++r) {
    JoinRequestInfo req = Holder(r, absl::StrCat("pod-", r));
    ASSERT_TRUE(table->Join(req, kT0, absl::StrCat("token-", r)).ok());
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(table
                    ->Heartbeat(r, absl::StrCat("token-", r), table->epoch(), 7,
                                MemberPhase::kReady, kT0)
                    .ok());
  }
  ASSERT_TRUE(table->ready());
  ASSERT_TRUE(table
                  ->Heartbeat(0, "token-0", table->epoch(), 7,
                              MemberPhase::kReady, kT0 + absl::Seconds(1))
                  .ok());
  ASSERT_EQ(table->ExpireLeases(kT0 + kLease), std::vector<int>{1});
  EXPECT_FALSE(table->failed());  // Its holder may come back.
  auto replacement = table->Join(Request(1, "pod-1b"), kT0 + kLease, "t");
  ASSERT_TRUE(replacement.ok());
  ASSERT_TRUE(table->failed());
  EXPECT_EQ(table->decisions().back().kind, DecisionKind::kJobFailed);
  EXPECT_NE(table->failure().find("shard 1 at step 7 is lost"),
            std::string::npos)
      << table->failure();
  EXPECT_NE(table->failure().find("held by rank 1"), std::string::npos);
  EXPECT_NE(table->failure().find("no --checkpoint_dir"), std::string::npos);
  // Terminal: every call says so, and nothing changes any more.
  const int64_t epoch = table->epoch();
  EXPECT_EQ(
      table
          ->Heartbeat(0, "token-0", epoch, 7, MemberPhase::kReady, kT0 + kLease)
          .code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      table->Join(Request(1, "pod-1c"), kT0 + kLease, "u").status().code(),
      absl::StatusCode::kDataLoss);
  EXPECT_FALSE(table->ready());
  EXPECT_EQ(table->epoch(), epoch);
}

TEST_F(MembershipTableTest, FastPathReportRemovesSuspectAtOnce) {
  JoinAllReady(kT0);
  const int64_t epoch = table_->epoch();
  auto out = table_->ReportFailure(
      1, "token-1", epoch, 3, "allgather: connection reset",
      ProbeResult::kNotProbed, kT0 + absl::Milliseconds(10));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->removed, std::vector<int>{3});
  EXPECT_EQ(out->epoch, epoch + 1);
  EXPECT_EQ(table_->slots()[3].phase, MemberPhase::kFailed);
  EXPECT_NE(out->decision.find("connection reset"), std::string::npos);
  // A second survivor reporting the same failure for the old epoch: ABORTED.
  auto late = table_->ReportFailure(0, "token-0", epoch, 3, "same",
                                    ProbeResult::kNotProbed,
                                    kT0 + absl::Milliseconds(11));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kAborted);
}

TEST_F(MembershipTableTest, FalseAccusationsDoNotEvictHealthyMembers) {
  JoinAllReady(kT0);
  // Rank 0 is sick: its collectives fail with everyone. Its first report is
  // answered by a probe: the suspect is alive, nobody is removed.
  MonoTime now = kT0 + absl::Milliseconds(100);
  auto first = table_->ReportFailure(0, "token-0", table_->epoch(), 2, "x",
                                     ProbeResult::kAlive, now);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->removed.empty());
  // Everyone re-forms the next epoch; rank 0 accuses someone else.
  for (int r = 0; r < 4; ++r) ReadyHeartbeat(r, now);
  auto second = table_->ReportFailure(0, "token-0", table_->epoch(), 3, "y",
                                      ProbeResult::kNotProbed,
                                      now + absl::Milliseconds(50));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->removed, std::vector<int>{0});  // The odd one out.
  for (int r : {1, 2, 3}) EXPECT_TRUE(table_->slots()[r].live());
}

TEST_F(MembershipTableTest, RejectsBadReportsWithoutChangingState) {
  JoinAllReady(kT0);
  const std::string before = Snapshot();
  EXPECT_EQ(table_
                ->ReportFailure(1, "token-1", table_->epoch(), 1, "",
                                ProbeResult::kNotProbed, kT0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_
                ->ReportFailure(1, "wrong", table_->epoch(), 2, "",
                                ProbeResult::kNotProbed, kT0)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table_
                ->ReportFailure(1, "token-1", table_->epoch() + 5, 2, "",
                                ProbeResult::kNotProbed, kT0)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Snapshot(), before);
}

TEST_F(MembershipTableTest, RestartedCoordinatorRebuildsFromRejoiningDaemons) {
  // A fresh table (the restarted coordinator) and daemons that were in epoch
  // 9 at step 42, holding their shards.
  for (int r = 0; r < 4; ++r) {
    JoinRequestInfo req = Request(r, absl::StrCat("pod-", r));
    req.last_epoch = 9;
    req.holds_shard = true;
    req.last_committed_step = 42;
    req.model_fingerprint = 0xabc;
    auto out = table_->Join(req, kT0, absl::StrCat("token-", r));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->rank, r);
    EXPECT_GT(out->epoch, 9);
    EXPECT_FALSE(out->recovery.has_value());  // Nothing lost, nothing copied.
  }
  EXPECT_EQ(table_->committed_step(), 42);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                42, MemberPhase::kReady, kT0)
                    .ok());
  }
  EXPECT_TRUE(table_->ready());
}

TEST_F(MembershipTableTest, RejectsAShardOfAnotherModel) {
  JoinRequestInfo a = Request(0, "pod-0");
  a.holds_shard = true;
  a.model_fingerprint = 1;
  ASSERT_TRUE(table_->Join(a, kT0, "t0").ok());
  JoinRequestInfo b = Request(1, "pod-1");
  b.holds_shard = true;
  b.model_fingerprint = 2;
  EXPECT_EQ(table_->Join(b, kT0, "t1").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(MembershipTableTest, LeaveEmptiesTheSlotAndIsIdempotent) {
  JoinAllReady(kT0);
  const int64_t epoch = table_->epoch();
  ASSERT_TRUE(table_->Leave(2, "token-2", "drain", kT0).ok());
  EXPECT_EQ(table_->slots()[2].phase, MemberPhase::kLeft);
  EXPECT_EQ(table_->epoch(), epoch + 1);
  EXPECT_TRUE(table_->Leave(2, "token-2", "again", kT0).ok());
  EXPECT_EQ(table_->epoch(), epoch + 1);
}

}  // namespace
}  // namespace shardd::coordinator

namespace shardd::coordinator {
namespace {

TEST_F(MembershipTableTest,
       UnboundedCheckpointReportsAreRefusedChangingNothing) {
  JoinAllReady(kT0);
  const std::string before = Snapshot();
  CheckpointInventory huge{true, {}, ""};
  for (int64_t s = 0; s < 5000; ++s) huge.steps.push_back(s);
  absl::Status s = table_->Heartbeat(0, "token-0", table_->epoch(), 7,
                                     MemberPhase::kReady, kT0, {}, &huge);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("checkpoints.steps: 5000 entries"),
            std::string::npos)
      << s;
  CheckpointInventory unordered{true, {6, 3}, ""};
  s = table_->Heartbeat(0, "token-0", table_->epoch(), 7, MemberPhase::kReady,
                        kT0, {}, &unordered);
  EXPECT_NE(s.message().find("checkpoints.steps[1]: 3"), std::string::npos)
      << s;
  JoinRequestInfo req = Request(-1, "pod-x");
  req.checkpoints.problem = std::string(5000, 'x');
  EXPECT_EQ(table_->Join(req, kT0, "t").status().code(),
            absl::StatusCode::kInvalidArgument);
  req.checkpoints.problem.clear();
  req.pending_step = -1;
  EXPECT_EQ(table_->Join(req, kT0, "t").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Snapshot(), before);
  EXPECT_TRUE(table_->slots()[0].checkpoints.steps.empty());
}

TEST_F(MembershipTableTest, LostShardWithCommonCheckpointRollsBack) {
  const MonoTime t0 = MonoTime::FromOrigin(absl::Seconds(1000));
  JoinAllReady(t0);  // Everyone READY at step 7.
  EXPECT_EQ(table_->committed_step(), 7);
  CheckpointInventory inventory{true, {4}, ""};
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                7, MemberPhase::kReady, t0, {}, &inventory)
                    .ok());
  }
  // Both holders of shard 1 are replaced by members holding checkpoint 4.
  ASSERT_TRUE(table_->Leave(1, "token-1", "test", t0).ok());
  ASSERT_TRUE(table_->Leave(3, "token-3", "test", t0).ok());
  for (int r : {1, 3}) {
    JoinRequestInfo req = Request(r, absl::StrCat("pod-", r, "b"));
    req.checkpoints = inventory;
    ASSERT_TRUE(table_->Join(req, t0, absl::StrCat("t", r, "b")).ok());
  }
  ASSERT_EQ(table_->plan().kind, PlanKind::kRollback);
  EXPECT_EQ(table_->plan().step, 4);
  EXPECT_EQ(table_->decisions().back().kind, DecisionKind::kRecoveryPlanned);
  for (int r = 0; r < 4; ++r) {
    const std::string token =
        r % 2 == 1 ? absl::StrCat("t", r, "b") : absl::StrCat("token-", r);
    ASSERT_TRUE(table_
                    ->Heartbeat(r, token, table_->epoch(), 4,
                                MemberPhase::kReady,
                                t0 + absl::Milliseconds(20))
                    .ok());
  }
  ASSERT_TRUE(table_->ready());
  EXPECT_EQ(table_->committed_step(), 4);
  EXPECT_EQ(table_->checkpoint_fallbacks(), 1);
  EXPECT_NE(table_->decisions().back().reason.find("checkpoint fallback"),
            std::string::npos)
      << table_->decisions().back().reason;
}

TEST_F(MembershipTableTest, RollbackWithNoStepLostIsStillACheckpointFallback) {
  // The loss lands right after the checkpoint step: every rank holds step 7
  // on disk, the replacements restore it, the survivors keep their state.
  const MonoTime t0 = MonoTime::FromOrigin(absl::Seconds(1000));
  JoinAllReady(t0);  // Everyone READY at step 7.
  CheckpointInventory inventory{true, {4, 7}, ""};
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                7, MemberPhase::kReady, t0, {}, &inventory)
                    .ok());
  }
  ASSERT_TRUE(table_->Leave(1, "token-1", "test", t0).ok());
  ASSERT_TRUE(table_->Leave(3, "token-3", "test", t0).ok());
  for (int r : {1, 3}) {
    JoinRequestInfo req = Request(r, absl::StrCat("pod-", r, "b"));
    req.checkpoints = inventory;
    ASSERT_TRUE(table_->Join(req, t0, absl::StrCat("t", r, "b")).ok());
  }
  ASSERT_EQ(table_->plan().kind, PlanKind::kRollback);
  EXPECT_EQ(table_->plan().step, 7);
  for (int r = 0; r < 4; ++r) {
    const std::string token =
        r % 2 == 1 ? absl::StrCat("t", r, "b") : absl::StrCat("token-", r);
    ASSERT_TRUE(table_
                    ->Heartbeat(r, token, table_->epoch(), 7,
                                MemberPhase::kReady,
                                t0 + absl::Milliseconds(20))
                    .ok());
  }
  ASSERT_TRUE(table_->ready());
  EXPECT_EQ(table_->committed_step(), 7);
  EXPECT_EQ(table_->checkpoint_fallbacks(), 1);
  const std::string& reason = table_->decisions().back().reason;
  EXPECT_NE(reason.find("READY at step 7 (checkpoint fallback"),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("no step is lost"), std::string::npos) << reason;
}

// A resumed job (every holder registered step 7 from saved state, nothing
// trained since): both replicas of shard 0 are replaced while registering.
// The plan makes shard 0 again by registration: the replacements are READY
// without it (step 0), the epoch is ready at step 7, not a fallback, and
// their registration then reports step 7 in the same epoch.
TEST_F(MembershipTableTest, AShardMadeAgainByRegistrationIsReadyWithoutIt) {
  const MonoTime t0 = MonoTime::FromOrigin(absl::Seconds(1000));
  JoinAllReady(t0);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                7, MemberPhase::kReady, t0, {}, nullptr,
                                nullptr, /*registration_state=*/true)
                    .ok());
  }
  ReplaceShardZero(t0);
  ASSERT_EQ(table_->plan().kind, PlanKind::kResume);
  EXPECT_EQ(table_->plan().step, 7);
  EXPECT_EQ(table_->plan().remade_shards, std::vector<int>{0});
  const int64_t epoch = table_->epoch();
  const MonoTime t1 = t0 + absl::Milliseconds(20);
  for (int r = 0; r < 4; ++r) {
    const bool replaced = r % 2 == 0;
    ASSERT_TRUE(table_
                    ->Heartbeat(r,
                                replaced ? absl::StrCat("t", r, "b")
                                         : absl::StrCat("token-", r),
                                epoch, replaced ? 0 : 7, MemberPhase::kReady,
                                t1, {}, nullptr, nullptr, !replaced)
                    .ok())
        << r;
  }
  ASSERT_TRUE(table_->ready());
  EXPECT_EQ(table_->epoch(), epoch);
  EXPECT_EQ(table_->committed_step(), 7);
  EXPECT_EQ(table_->checkpoint_fallbacks(), 0);
  const std::string& reason = table_->decisions().back().reason;
  EXPECT_NE(reason.find("READY at step 7 (shard 0 to be made again by "
                        "registering the model)"),
            std::string::npos)
      << reason;
  // The replacements registered: step 7 in the same epoch.
  for (int r : {0, 2}) {
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("t", r, "b"), epoch, 7,
                                MemberPhase::kReady, t1, {}, nullptr, nullptr,
                                true)
                    .ok());
  }
  EXPECT_EQ(table_->epoch(), epoch);
  EXPECT_EQ(table_->committed_step(), 7);
}

// Without the holders' word that they hold what they registered, a READY
// at step 0 from a replacement of a lost shard is not what a plan means.
TEST_F(MembershipTableTest, ATrainedShardWithoutHoldersIsNotMadeAgain) {
  const MonoTime t0 = MonoTime::FromOrigin(absl::Seconds(1000));
  JoinAllReady(t0);  // Registration state never reported.
  ReplaceShardZero(t0);
  EXPECT_EQ(table_->plan().kind, PlanKind::kFailed);
  EXPECT_TRUE(table_->plan().remade_shards.empty());
}

TEST_F(MembershipTableTest, ReadyAtAnotherStepThanThePlanStartsANewEpoch) {
  JoinAllReady(kT0);
  ASSERT_TRUE(table_->Leave(1, "token-1", "test", kT0).ok());
  ASSERT_TRUE(table_->Join(Request(1, "pod-1b"), kT0, "t1b").ok());
  ASSERT_EQ(table_->plan().kind, PlanKind::kResume);
  const int64_t epoch = table_->epoch();
  // The replacement claims READY without having copied (step 0).
  const absl::Status s =
      table_->Heartbeat(1, "t1b", epoch, 0, MemberPhase::kReady, kT0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("plan is step 7"), std::string::npos) << s;
  EXPECT_EQ(table_->epoch(), epoch + 1);
  EXPECT_FALSE(table_->ready());
}

TEST_F(MembershipTableTest, SameMembersFailingEpochsEndTheJobOnce) {
  JoinAllReady(kT0);
  for (int i = 0; i < 4; ++i) {
    auto out = table_->ReportFailure(0, "token-0", table_->epoch(), -1,
                                     "allgather: timed out",
                                     ProbeResult::kNotProbed, kT0);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(table_->failed()) << i;
  }
  // A ready epoch in between starts the count again.
  for (int r = 0; r < 4; ++r) ReadyHeartbeat(r, kT0);
  ASSERT_TRUE(table_->ready());
  // The ready epoch's failure is not a failed epoch; the 5 after it are.
  for (int i = 0; i < 6; ++i) {
    ASSERT_FALSE(table_->failed()) << i;
    ASSERT_TRUE(table_
                    ->ReportFailure(2, "token-2", table_->epoch(), -1,
                                    "allgather: timed out",
                                    ProbeResult::kNotProbed, kT0)
                    .ok());
  }
  ASSERT_TRUE(table_->failed());
  int stalled = 0;
  for (const Decision& d : table_->decisions()) {
    if (d.kind == DecisionKind::kEpochStalled) ++stalled;
  }
  EXPECT_EQ(stalled, 1);
  EXPECT_NE(table_->failure().find("5 epochs in a row"), std::string::npos)
      << table_->failure();
  EXPECT_NE(table_->failure().find("allgather: timed out"), std::string::npos);
  EXPECT_EQ(table_
                ->ReportFailure(2, "token-2", table_->epoch(), -1, "again",
                                ProbeResult::kNotProbed, kT0)
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(MembershipTableTest,
       ReadyEpochsWithoutACommitEndTheJobNamingTheQuietTrainer) {
  JoinAllReady(kT0);
  // Rank 2's trainer exited for good at kT0: its daemon lives and reports
  // it; the others' trainers keep calling (and redoing the step).
  MonoTime now = kT0;
  const auto heartbeats = [&](MonoTime at) {
    for (int r = 0; r < 4; ++r) {
      TrainerReport trainer;
      trainer.attached = true;
      trainer.quiet = r == 2 ? at - kT0 : absl::ZeroDuration();
      ASSERT_TRUE(table_
                      ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                  7, MemberPhase::kReady, at, {}, nullptr,
                                  &trainer)
                      .ok());
    }
  };
  heartbeats(now);
  ASSERT_TRUE(table_->ready());
  // Every epoch forms and ends by a collective timeout, no step committed.
  for (int i = 0; i < 9; ++i) {
    now += absl::Seconds(3);
    ASSERT_TRUE(table_
                    ->ReportFailure(3, "token-3", table_->epoch(), -1,
                                    "all-gather: rank 0 did not reach round 0",
                                    ProbeResult::kNotProbed, now)
                    .ok());
    heartbeats(now + absl::Milliseconds(50));
    ASSERT_TRUE(table_->ready()) << i;
    ASSERT_FALSE(table_->failed()) << i;
  }
  now += absl::Seconds(3);
  ASSERT_TRUE(table_
                  ->ReportFailure(3, "token-3", table_->epoch(), -1,
                                  "all-gather: rank 0 did not reach round 0",
                                  ProbeResult::kNotProbed, now)
                  .ok());
  ASSERT_TRUE(table_->failed());
  const std::string& failure = table_->failure();
  EXPECT_NE(failure.find("10 epochs in a row ended without a step committed "
                         "(the last committed step is 7)"),
            std::string::npos)
      << failure;
  EXPECT_NE(failure.find("rank 2's trainer has not called its daemon for 30s "
                         "(since before the first of these epochs ended"),
            std::string::npos)
      << failure;
  // Each dismissed report said so too.
  bool named = false;
  for (const Decision& d : table_->decisions()) {
    if (d.kind == DecisionKind::kFailureReportDismissed &&
        d.reason.find("; in this epoch rank 2's trainer has not called its "
                      "daemon for 27s") != std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(failure.find("rank 0's trainer"), std::string::npos) << failure;
  EXPECT_NE(failure.find("(5 more)"), std::string::npos) << failure;
  EXPECT_EQ(table_->decisions().back().kind, DecisionKind::kJobFailed);
}

TEST_F(MembershipTableTest, ACommittedStepRestartsTheCountOfEpochsWithoutOne) {
  JoinAllReady(kT0);
  const auto fail_and_form = [&] {
    ASSERT_TRUE(table_
                    ->ReportFailure(0, "token-0", table_->epoch(), -1,
                                    "timed out", ProbeResult::kNotProbed, kT0)
                    .ok());
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(table_
                      ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                  table_->committed_step(), MemberPhase::kReady,
                                  kT0)
                      .ok())
          << table_->failure();
    }
    ASSERT_TRUE(table_->ready());
  };
  for (int i = 0; i < 9; ++i) fail_and_form();
  table_->CommitStep(8);  // A step completes: progress.
  for (int i = 0; i < 9; ++i) fail_and_form();
  EXPECT_FALSE(table_->failed());
  // A vote that only repeats the committed step is no progress.
  table_->CommitStep(8);
  ASSERT_TRUE(table_
                  ->ReportFailure(0, "token-0", table_->epoch(), -1,
                                  "timed out", ProbeResult::kNotProbed, kT0)
                  .ok());
  EXPECT_TRUE(table_->failed());
  EXPECT_EQ(table_->failure().find("every trainer called"), std::string::npos);
  EXPECT_NE(table_->failure().find("did not report their trainers"),
            std::string::npos)
      << table_->failure();
}

TEST_F(MembershipTableTest, RejectsATrainerQuietTimeOutOfRange) {
  JoinAllReady(kT0);
  TrainerReport trainer;
  trainer.attached = true;
  trainer.quiet = absl::Milliseconds(-1);
  const absl::Status s =
      table_->Heartbeat(0, "token-0", table_->epoch(), 7, MemberPhase::kReady,
                        kT0, {}, nullptr, &trainer);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("trainer.quiet_ms"), std::string::npos) << s;
  EXPECT_FALSE(table_->slots()[0].trainer.reported);
  trainer.quiet = absl::Milliseconds(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(table_
                ->Heartbeat(0, "token-0", table_->epoch(), 7,
                            MemberPhase::kReady, kT0, {}, nullptr, &trainer)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(table_->slots()[0].trainer.reported);
}

TEST_F(MembershipTableTest, LostShardWaitsOneGraceForItsHoldersThenFails) {
  JoinAllReady(kT0);
  // Ranks 1 and 3 (both holders of shard 1) go silent.
  const MonoTime t1 = kT0 + absl::Seconds(1);
  for (int r : {0, 2}) ReadyHeartbeat(r, t1);
  ASSERT_EQ(table_->ExpireLeases(kT0 + kLease), (std::vector<int>{1, 3}));
  EXPECT_FALSE(table_->failed());
  EXPECT_EQ(table_->plan().kind, PlanKind::kWait);
  // ExpireLeases is called again when the wait (two leases after the
  // removal) ends.
  for (int r : {0, 2}) ReadyHeartbeat(r, kT0 + absl::Seconds(3));
  EXPECT_EQ(table_->next_expiry(), kT0 + 3 * kLease);
  table_->Settle(kT0 + 3 * kLease - absl::Milliseconds(1));
  EXPECT_FALSE(table_->failed());
  table_->Settle(kT0 + 3 * kLease);
  ASSERT_TRUE(table_->failed());
  EXPECT_NE(table_->failure().find("held by ranks 1, 3"), std::string::npos)
      << table_->failure();
}

TEST_F(MembershipTableTest, HolderBackWithinTheGraceSavesTheJob) {
  JoinAllReady(kT0);
  for (int r : {0, 2}) ReadyHeartbeat(r, kT0 + absl::Seconds(1));
  ASSERT_EQ(table_->ExpireLeases(kT0 + kLease), (std::vector<int>{1, 3}));
  // Rank 3 was only hung: it re-joins holding its shard.
  JoinRequestInfo back = Holder(3, "pod-3");
  back.incarnation = "pod-3-inc1";
  ASSERT_TRUE(table_->Join(back, kT0 + kLease, "t3").ok());
  table_->Settle(kT0 + 4 * kLease);
  EXPECT_FALSE(table_->failed());
  ASSERT_TRUE(table_->Join(Request(1, "pod-1b"), kT0 + 4 * kLease, "t1").ok());
  ASSERT_EQ(table_->plan().kind, PlanKind::kResume);
  ASSERT_EQ(table_->plan().copies.size(), 1u);
  EXPECT_EQ(table_->plan().copies[0].target_rank, 1);
  EXPECT_EQ(table_->plan().copies[0].source_ranks, std::vector<int>{3});
}

TEST_F(MembershipTableTest, ReadyAtTheSameStepIsNoFallback) {
  JoinAllReady(MonoTime::FromOrigin(absl::Seconds(1000)));
  EXPECT_EQ(table_->committed_step(), 7);
  EXPECT_EQ(table_->checkpoint_fallbacks(), 0);
}

// Rank `r`'s heartbeat reporting `unreachable` (ranks, their current
// incarnations, 3 failed probes each).
absl::Status ReachabilityHeartbeat(MembershipTable& table, int r,
                                   const std::vector<int>& unreachable,
                                   MonoTime now) {
  std::vector<UnreachablePeer> peers;
  for (const int u : unreachable) {
    peers.push_back({u, table.slots()[u].incarnation, 3, "connect failed"});
  }
  return table.Heartbeat(r, absl::StrCat("token-", r), table.epoch(), 7,
                         MemberPhase::kReady, now, std::move(peers));
}

TEST_F(MembershipTableTest, MemberCutOffFromItsPeersIsRemovedAndQuarantined) {
  JoinAllReady(kT0);
  const int64_t epoch = table_->epoch();
  // The survivors report rank 2; rank 2 reports them: nothing happens until
  // both ends of every link agree.
  ASSERT_TRUE(ReachabilityHeartbeat(*table_, 0, {2}, kT0).ok());
  ASSERT_TRUE(ReachabilityHeartbeat(*table_, 1, {2}, kT0).ok());
  ASSERT_TRUE(ReachabilityHeartbeat(*table_, 3, {2}, kT0).ok());
  EXPECT_TRUE(table_->slots()[2].live());
  EXPECT_EQ(table_->epoch(), epoch);
  EXPECT_EQ(table_->broken_peer_links(), 0);  // One-sided so far.
  const absl::Status own =
      ReachabilityHeartbeat(*table_, 2, {0, 1, 3}, kT0 + absl::Seconds(1));
  // Rank 2's own heartbeat removed it: NOT_FOUND says why, so it re-joins.
  EXPECT_TRUE(absl::IsNotFound(own)) << own;
  EXPECT_NE(own.message().find("cut off from its peers"), std::string::npos);
  EXPECT_EQ(table_->slots()[2].phase, MemberPhase::kFailed);
  EXPECT_GT(table_->epoch(), epoch);
  bool logged = false;
  for (const Decision& d : table_->decisions()) {
    if (d.kind == DecisionKind::kMemberRemoved && d.ranks == std::vector{2}) {
      logged = true;
      EXPECT_NE(d.reason.find("rank 2 cut off from its peers: it and ranks 0, "
                              "1, 3 report each other unreachable"),
                std::string::npos)
          << d.reason;
      EXPECT_NE(d.reason.find("127.0.0.1:7003 is quarantined for 30s"),
                std::string::npos)
          << d.reason;
    }
  }
  EXPECT_TRUE(logged);
  EXPECT_EQ(table_->broken_peer_links(), 3);  // At the decision.
  EXPECT_EQ(table_->broken_links(),
            (std::vector<std::pair<int, int>>{{0, 2}, {1, 2}, {2, 3}}));
  // The next report decides again without the removed member's links.
  ASSERT_TRUE(
      ReachabilityHeartbeat(*table_, 0, {}, kT0 + absl::Seconds(2)).ok());
  EXPECT_EQ(table_->broken_peer_links(), 0);

  // Its re-join from the same address is refused while quarantined, and
  // only the first refusal is logged.
  const auto refused =
      table_->Join(Request(2, "pod-2"), kT0 + absl::Seconds(5), "token-2b");
  ASSERT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("quarantined for another 26s"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(table_->decisions().back().kind, DecisionKind::kJoinRejected);
  const std::string after_first = Snapshot();
  EXPECT_FALSE(
      table_->Join(Request(2, "pod-2"), kT0 + absl::Seconds(6), "token-2c")
          .ok());
  EXPECT_EQ(Snapshot(), after_first);
  EXPECT_EQ(table_->slots()[2].phase, MemberPhase::kFailed);

  // A replacement at another address takes the slot at once and copies
  // its shard from a replica.
  JoinRequestInfo elsewhere = Request(2, "pod-2");
  elsewhere.peer_address = "10.0.0.9:7070";
  elsewhere.incarnation = "pod-2-inc2";
  const auto replacement =
      table_->Join(elsewhere, kT0 + absl::Seconds(7), "token-2d");
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_TRUE(replacement->recovery.has_value());
}

TEST_F(MembershipTableTest, QuarantineEndsAndDoublesOnTheNextRemoval) {
  JoinAllReady(kT0);
  auto cut_off = [&](MonoTime now) {
    for (int r : {0, 1, 3}) {
      ASSERT_TRUE(ReachabilityHeartbeat(*table_, r, {2}, now).ok());
    }
    EXPECT_TRUE(
        absl::IsNotFound(ReachabilityHeartbeat(*table_, 2, {0, 1, 3}, now)));
  };
  cut_off(kT0);
  // After 30 s the same address may join again (the partition healed).
  ASSERT_TRUE(
      table_->Join(Request(2, "pod-2"), kT0 + absl::Seconds(30), "token-2")
          .ok());
  // The survivors' reports still name rank 2's incarnation: with rank 2's
  // own report empty nothing is broken both ways.
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(
        ReachabilityHeartbeat(*table_, r, {2}, kT0 + absl::Seconds(31)).ok());
  }
  EXPECT_TRUE(table_->slots()[2].live());
  // Cut off again: the second quarantine lasts twice as long.
  cut_off(kT0 + absl::Seconds(40));
  const auto& q = table_->quarantines().at("127.0.0.1:7003");
  EXPECT_EQ(q.removals, 2);
  EXPECT_EQ(q.until, kT0 + absl::Seconds(100));
  EXPECT_TRUE(absl::IsUnavailable(
      table_->Join(Request(2, "pod-2"), kT0 + absl::Seconds(99), "token-2")
          .status()));
}

TEST_F(MembershipTableTest, ReportsAboutAReplacedProcessDoNotCount) {
  JoinAllReady(kT0);
  // Rank 2 reports the others; they report an incarnation of rank 2 that
  // is no longer the holder.
  for (int r : {0, 1, 3}) {
    std::vector<UnreachablePeer> stale = {{2, "pod-2-old", 3, "timeout"}};
    ASSERT_TRUE(table_
                    ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                7, MemberPhase::kReady, kT0, stale)
                    .ok());
  }
  ASSERT_TRUE(ReachabilityHeartbeat(*table_, 2, {0, 1, 3}, kT0).ok());
  EXPECT_TRUE(table_->slots()[2].live());
  EXPECT_TRUE(table_->quarantines().empty());
}

TEST_F(MembershipTableTest, UndecidablePartitionIsLoggedOnceAndRemovesNoOne) {
  JoinAllReady(kT0);
  const int64_t epoch = table_->epoch();
  ASSERT_TRUE(ReachabilityHeartbeat(*table_, 0, {1}, kT0).ok());
  ASSERT_TRUE(ReachabilityHeartbeat(*table_, 1, {0}, kT0).ok());
  // Not logged before it has lasted a lease (reports of a partition being
  // noticed arrive one by one), then once.
  ASSERT_TRUE(
      ReachabilityHeartbeat(*table_, 0, {1}, kT0 + absl::Seconds(1)).ok());
  for (const Decision& d : table_->decisions()) {
    EXPECT_NE(d.kind, DecisionKind::kPartitionUndecided);
  }
  for (int s = 2; s < 5; ++s) {
    ASSERT_TRUE(
        ReachabilityHeartbeat(*table_, 1, {0}, kT0 + absl::Seconds(s)).ok());
  }
  int undecided = 0;
  for (const Decision& d : table_->decisions()) {
    if (d.kind == DecisionKind::kPartitionUndecided) {
      ++undecided;
      EXPECT_NE(d.reason.find("cannot tell which side is cut off"),
                std::string::npos)
          << d.reason;
      EXPECT_EQ(d.ranks, (std::vector<int>{0, 1}));
    }
  }
  EXPECT_EQ(undecided, 1);
  // The link stays listed (GetClusterState's broken_links) while it lasts.
  EXPECT_EQ(table_->broken_links(), (std::vector<std::pair<int, int>>{{0, 1}}));
  EXPECT_EQ(table_->epoch(), epoch);
  for (const SlotRecord& s : table_->slots()) EXPECT_TRUE(s.live());
}

}  // namespace
}  // namespace shardd::coordinator

namespace shardd::coordinator {
namespace {

// After a coordinator restart the members re-join in any order; some hold
// no shard (replacements). Whatever the order, the plan decided once every
// slot is claimed is the same, nothing is declared ready or failed before
// that, and the job fails exactly when a shard has no holder and no
// checkpoint every rank holds. W = 4, F = 2: shard 0 on ranks 0 and 2,
// shard 1 on ranks 1 and 3.
struct RestartCase {
  const char* name;
  std::vector<int> shardless;
  // Checkpoint steps of every rank (none: no --checkpoint_dir), and ranks
  // that hold none intact.
  std::vector<int64_t> checkpoints;
  std::vector<int> without_checkpoint;
  PlanKind expected;
  int64_t step;  // RESUME / ROLLBACK step.
};

TEST(MembershipTableRestartTest, EveryJoinOrderGivesThePlanTheShardsAllow) {
  const RestartCase cases[] = {
      {"one replacement", {1}, {}, {}, PlanKind::kResume, 9},
      {"replacements in both groups", {0, 1}, {}, {}, PlanKind::kResume, 9},
      {"both holders of shard 0, no checkpoints",
       {0, 2},
       {},
       {},
       PlanKind::kFailed,
       0},
      {"both holders of shard 0, checkpoints",
       {0, 2},
       {3, 6},
       {},
       PlanKind::kRollback,
       6},
      {"both holders of shard 0, rank 1 holds no checkpoint",
       {0, 2},
       {3, 6},
       {1},
       PlanKind::kFailed,
       0},
      {"both holders of shard 0, rank 2's files missing",
       {0, 2},
       {3, 6},
       {2},
       PlanKind::kFailed,
       0},
      {"one replacement, checkpoints unused",
       {3},
       {3, 6},
       {},
       PlanKind::kResume,
       9},
  };
  const MonoTime t0 = MonoTime::FromOrigin(absl::Seconds(5000));
  const absl::Duration lease = absl::Milliseconds(1500);
  for (const RestartCase& c : cases) {
    std::vector<int> order = {0, 1, 2, 3};
    int orders = 0;
    do {
      SCOPED_TRACE(absl::StrCat(c.name, ", join order ", order[0], order[1],
                                order[2], order[3]));
      MembershipOptions o;
      o.world_size = 4;
      o.sharding_factor = 2;
      o.detector.lease = lease;
      o.started = t0;  // A restarted coordinator: nothing known.
      auto table = MembershipTable::Create(o);
      ASSERT_TRUE(table.ok());
      MonoTime now = t0;
      for (size_t i = 0; i < order.size(); ++i) {
        const int r = order[i];
        const bool fresh = std::find(c.shardless.begin(), c.shardless.end(),
                                     r) != c.shardless.end();
        JoinRequestInfo req;
        req.rank = r;
        req.identity = absl::StrCat("pod-", r);
        req.peer_address = absl::StrCat("127.0.0.1:", 7000 + r);
        req.incarnation = absl::StrCat("inc-", r, fresh ? "-new" : "");
        req.last_epoch = fresh ? 0 : 12;
        req.holds_shard = !fresh;
        req.last_committed_step = fresh ? 0 : 9;
        if (!c.checkpoints.empty()) {
          req.checkpoints.keeps = true;
          if (std::find(c.without_checkpoint.begin(),
                        c.without_checkpoint.end(),
                        r) == c.without_checkpoint.end()) {
            req.checkpoints.steps = c.checkpoints;
          } else {
            req.checkpoints.problem = "step-6.shardckpt: crc32c mismatch";
          }
        }
        now += absl::Milliseconds(100);
        ASSERT_TRUE(table->Join(req, now, absl::StrCat("t", r)).ok());
        if (i + 1 < order.size()) {
          ASSERT_EQ(table->plan().kind, PlanKind::kWait);
          ASSERT_FALSE(table->failed());
        }
      }
      const EpochPlan& plan = table->plan();
      if (c.expected == PlanKind::kFailed) {
        ASSERT_TRUE(table->failed());
        EXPECT_NE(table->failure().find("shard 0 at step 9 is lost"),
                  std::string::npos)
            << table->failure();
      } else {
        ASSERT_FALSE(table->failed()) << table->failure();
        ASSERT_EQ(plan.kind, c.expected) << plan.reason;
        EXPECT_EQ(plan.step, c.step);
        if (c.expected == PlanKind::kResume) {
          ASSERT_EQ(plan.copies.size(), c.shardless.size());
          for (const ShardCopy& copy : plan.copies) {
            for (int source : copy.source_ranks) {
              EXPECT_EQ(source % 2, copy.target_rank % 2);
              EXPECT_EQ(
                  std::find(c.shardless.begin(), c.shardless.end(), source),
                  c.shardless.end());
            }
          }
        }
        // Ready only when everyone reports the plan's step.
        for (int r = 0; r < 4; ++r) {
          ASSERT_TRUE(table
                          ->Heartbeat(r, absl::StrCat("t", r), table->epoch(),
                                      c.step, MemberPhase::kReady, now)
                          .ok());
        }
        EXPECT_TRUE(table->ready());
        EXPECT_EQ(table->committed_step(), c.step);
      }
      ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    EXPECT_EQ(orders, 24);
  }
}

// Ranks 0..w-1 ("pod-R", a peer port each) join at kT0 with lease tokens
// `token_prefix`R.
void JoinAll(MembershipTable& table, int w, const std::string& token_prefix) {
  for (int r = 0; r < w; ++r) {
    JoinRequestInfo req;
    req.rank = r;
    req.identity = absl::StrCat("pod-", r);
    req.peer_address = absl::StrCat("127.0.0.1:", 7001 + r);
    req.incarnation = req.identity + "-inc1";
    ASSERT_TRUE(table.Join(req, kT0, absl::StrCat(token_prefix, r)).ok());
  }
}

// A coordinator stopped for 5 s (SIGSTOP, a frozen VM) finds on resuming
// that every lease ran out while it could not read heartbeats: it renews
// them once instead of removing all four members; a member that stays
// silent is removed one lease later.
TEST(MembershipTableStallTest, RenewsLeasesAfterTheCoordinatorDidNotRun) {
  MembershipOptions options;
  options.world_size = 4;
  options.sharding_factor = 2;
  options.detector.lease = kLease;
  options.detector.check_period = kLease / 4;
  auto table = MembershipTable::Create(options);
  ASSERT_TRUE(table.ok()) << table.status();
  JoinAll(*table, 4, "t");
  ASSERT_TRUE(table->ExpireLeases(kT0).empty());
  const int64_t epoch = table->epoch();
  const MonoTime resumed = kT0 + absl::Seconds(5);
  EXPECT_TRUE(table->ExpireLeases(resumed).empty());
  EXPECT_EQ(table->epoch(), epoch);
  EXPECT_EQ(table->stalls(), 1);
  const Decision& d = table->decisions().back();
  EXPECT_EQ(d.kind, DecisionKind::kCoordinatorStalled);
  EXPECT_EQ(d.ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(d.reason.find("did not run for 5s"), std::string::npos) << d.reason;
  EXPECT_EQ(table->next_expiry(), resumed + kLease);
  // Three catch up; rank 2 really died meanwhile. The coordinator checks
  // every 300 ms again, so no gap renews rank 2 a second time.
  std::vector<int> removed;
  MonoTime now = resumed;
  while (removed.empty() && now < resumed + 2 * kLease) {
    now += absl::Milliseconds(300);
    for (int r : {0, 1, 3}) {
      ASSERT_TRUE(table
                      ->Heartbeat(r, absl::StrCat("t", r), table->epoch(), 0,
                                  MemberPhase::kJoining, now)
                      .ok());
    }
    removed = table->ExpireLeases(now);
  }
  EXPECT_EQ(removed, std::vector<int>{2});
  EXPECT_EQ(now, resumed + kLease);
  EXPECT_EQ(table->stalls(), 1);
}

// A forming job of 64 (F = 8) whose members all joined at kT0.
class MembershipTableBehindTest : public ::testing::Test {
 protected:
  static constexpr int kW = 64;
  void SetUp() override {
    MembershipOptions options;
    options.world_size = kW;
    options.sharding_factor = 8;
    options.detector.lease = kLease;
    auto table = MembershipTable::Create(options);
    ASSERT_TRUE(table.ok());
    table_.emplace(*std::move(table));
    JoinAll(*table_, kW, "token-");
  }
  void Heartbeat(int from, int to, MonoTime now) {
    for (int r = from; r < to; ++r) {
      ASSERT_TRUE(table_
                      ->Heartbeat(r, absl::StrCat("token-", r), table_->epoch(),
                                  0, MemberPhase::kJoining, now)
                      .ok());
    }
  }
  int Live() const {
    int n = 0;
    for (const SlotRecord& s : table_->slots()) n += s.live();
    return n;
  }
  int Logged(DecisionKind kind) const {
    int n = 0;
    for (const Decision& d : table_->decisions()) n += d.kind == kind;
    return n;
  }
  std::optional<MembershipTable> table_;
};

TEST_F(MembershipTableBehindTest, HoldsExpiryWhileManyAreLateAndResumes) {
  // 40 renew; the heartbeats of 24 (over a tenth, and over 16) are stuck behind
  // a coordinator that cannot keep up.
  Heartbeat(0, 40, kT0 + absl::Seconds(1));
  const int64_t epoch = table_->epoch();
  EXPECT_TRUE(table_->ExpireLeases(kT0 + kLease).empty());
  EXPECT_EQ(table_->epoch(), epoch);
  EXPECT_EQ(Logged(DecisionKind::kLeaseExpiryDeferred), 1);
  EXPECT_EQ(table_->expiry_deferrals(), 1);
  EXPECT_NE(table_->decisions().back().reason.find("24 of 64 members"),
            std::string::npos)
      << table_->decisions().back().reason;
  // Held leases are in the past; the lease timer must not spin on them.
  EXPECT_GE(table_->next_expiry(), kT0 + kLease + kLease / 8);
  // The backlog drains: the 24 heartbeats arrive, late but alive.
  Heartbeat(40, kW, kT0 + absl::Seconds(2));
  EXPECT_TRUE(table_->ExpireLeases(kT0 + absl::Seconds(2)).empty());
  EXPECT_EQ(Logged(DecisionKind::kLeaseExpiryDeferred), 2);
  EXPECT_NE(table_->decisions().back().reason.find("resumed"),
            std::string::npos);
  EXPECT_EQ(Live(), kW);
}

TEST_F(MembershipTableBehindTest, ASpellEndingRenewsHeldLeasesOnceOnly) {
  Heartbeat(0, 40, kT0 + absl::Seconds(1));
  ASSERT_TRUE(table_->ExpireLeases(kT0 + kLease).empty());
  // 20 of the 24 catch up; 4 (< half the threshold of 16) stay silent.
  const MonoTime t1 = kT0 + absl::Seconds(2);
  Heartbeat(0, 60, t1);
  EXPECT_TRUE(table_->ExpireLeases(t1).empty());
  EXPECT_NE(table_->decisions().back().reason.find(
                "4 lease(s) that ran out meanwhile renewed once"),
            std::string::npos)
      << table_->decisions().back().reason;
  // One lease later the 4 are removed like any failure.
  Heartbeat(0, 60, t1 + kLease - absl::Milliseconds(1));
  EXPECT_EQ(table_->ExpireLeases(t1 + kLease),
            (std::vector<int>{60, 61, 62, 63}));
}

TEST_F(MembershipTableBehindTest, RemovesTheSilentOnceTheDeferralRunsOut) {
  const absl::Duration deferral =
      table_->options().detector.max_expiry_deferral;
  MonoTime now = kT0;
  // 24 are dead for good; the 40 others keep renewing.
  for (; now <= kT0 + kLease + deferral; now += absl::Milliseconds(500)) {
    Heartbeat(0, 40, now);
    const std::vector<int> removed = table_->ExpireLeases(now);
    if (now < kT0 + kLease + deferral) {
      ASSERT_TRUE(removed.empty()) << absl::FormatDuration(now - kT0);
    } else {
      EXPECT_EQ(removed.size(), 24u);
    }
  }
  EXPECT_EQ(Live(), 40);
  EXPECT_EQ(table_->expiry_deferrals(), 1);
}

}  // namespace
}  // namespace shardd::coordinator
