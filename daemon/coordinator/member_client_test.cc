#include "daemon/coordinator/member_client.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::coordinator {
namespace {

namespace pb = ::shardd::v1;

constexpr int kWorld = 4;

InProcessCoordinatorOptions Options(absl::Duration lease,
                                    absl::Duration heartbeat) {
  InProcessCoordinatorOptions o;
  o.coordinator.membership.world_size = kWorld;
  o.coordinator.membership.sharding_factor = 2;
  o.coordinator.membership.detector.lease = lease;
  o.heartbeat_interval = heartbeat;
  return o;
}

MemberClientOptions Member(const std::string& address, int rank) {
  MemberClientOptions o;
  o.coordinator_address = address;
  o.rank = rank;
  o.identity = absl::StrCat("node-", rank);
  // Nothing listens there: no test here needs the Peer service.
  o.peer_address = absl::StrCat("127.0.0.1:", 20000 + rank);
  o.initial_join_timeout = absl::Seconds(10);
  return o;
}

MonoTime Deadline() { return MonoNow() + absl::Seconds(15); }

// Every client waits until all W slots are live in one epoch, reports READY
// for it, and the epoch becomes ready. Returns that epoch.
// Every member reports READY at `step` (the step its shard is at).
int64_t MakeReady(const std::vector<std::unique_ptr<MemberClient>>& clients,
                  int64_t min_epoch, int64_t step = 0) {
  int64_t epoch = 0;
  for (const auto& c : clients) {
    auto v = c->WaitFor(
        [&](const MembershipView& v) {
          return v.AllLive() && v.epoch >= min_epoch;
        },
        Deadline());
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) epoch = std::max(epoch, v->epoch);
  }
  for (const auto& c : clients) EXPECT_TRUE(c->SetReady(epoch, step).ok());
  for (const auto& c : clients) {
    auto v = c->WaitForEpochReady(epoch, Deadline());
    EXPECT_TRUE(v.ok()) << v.status();
  }
  return epoch;
}

TEST(MemberClientTest, FourMembersJoinReportReadyAndTheEpochBecomesReady) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  std::vector<std::unique_ptr<MemberClient>> clients;
  for (int r = 0; r < kWorld; ++r) {
    auto c = MemberClient::Join(Member((*coord)->address(), r));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->rank(), r);
    EXPECT_EQ((*c)->join_response().heartbeat_interval_ms(), 500);
    clients.push_back(*std::move(c));
  }
  const int64_t epoch = MakeReady(clients, 1);
  // The first three joins share the forming epoch 1; the last starts 2.
  EXPECT_EQ(epoch, 2);
  const ClusterSnapshot s = (*coord)->manager().Snapshot();
  EXPECT_TRUE(s.ready);
  EXPECT_EQ(s.epoch, epoch);
  for (const SlotRecord& slot : s.slots) {
    EXPECT_EQ(slot.phase, MemberPhase::kReady) << slot.rank;
  }
}

TEST(MemberClientTest, ItsLeaseTokenOpensTheRendezvousForItsOwnRankOnly) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  std::vector<std::unique_ptr<MemberClient>> clients;
  for (int r = 0; r < 2; ++r) {
    auto c = MemberClient::Join(Member((*coord)->address(), r));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->lease_token(), (*c)->join_response().lease_token());
    EXPECT_FALSE((*c)->lease_token().empty());
    clients.push_back(*std::move(c));
  }
  CoordinatorManager& manager = (*coord)->manager();
  const int64_t epoch = manager.Snapshot().epoch;
  EXPECT_TRUE(manager
                  .RendezvousSet(clients[1]->lease_token(), epoch, "model/1",
                                 "spec", false)
                  .ok());
  EXPECT_EQ(manager
                .RendezvousSet(clients[1]->lease_token(), epoch, "model/0",
                               "evil", false)
                .code(),
            absl::StatusCode::kPermissionDenied);
  // Each client sent a secret of its own with its Join: a repeated Join
  // of its identity and incarnation without it gets no token.
  const ClusterSnapshot s = manager.Snapshot();
  EXPECT_FALSE(s.slots[0].join_secret.empty());
  EXPECT_NE(s.slots[0].join_secret, s.slots[1].join_secret);
  JoinRequestInfo impostor;
  impostor.rank = 0;
  impostor.identity = "node-0";
  impostor.peer_address = "127.0.0.1:20000";
  impostor.incarnation = clients[0]->incarnation();
  EXPECT_EQ(manager.Join(impostor).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(MemberClientTest, DestroyedMemberLosesItsLeaseAndTheOthersSeeIt) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(600), absl::Milliseconds(200)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  std::vector<std::unique_ptr<MemberClient>> clients;
  for (int r = 0; r < kWorld; ++r) {
    auto c = MemberClient::Join(Member((*coord)->address(), r));
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(*std::move(c));
  }
  const int64_t epoch = MakeReady(clients, 1);
  const MonoTime killed = MonoNow();
  clients[3].reset();  // No Leave: looks like a crash.
  auto v = clients[0]->WaitFor(
      [&](const MembershipView& v) {
        return v.epoch > epoch && v.LiveCount() == kWorld - 1;
      },
      Deadline());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->ready);
  EXPECT_LE(MonoNow() - killed, absl::Milliseconds(600 + 200 + 500));
  EXPECT_EQ((*coord)->manager().Snapshot().slots[3].phase,
            MemberPhase::kFailed);
  // The others kept their leases all along.
  for (int r = 0; r < 3; ++r) EXPECT_EQ(clients[r]->view().joins, 1);
}

TEST(MemberClientTest, MembersRejoinARestartedCoordinatorAndBecomeReadyAgain) {
  auto opts = Options(absl::Milliseconds(1500), absl::Milliseconds(300));
  auto coord = InProcessCoordinator::Start(opts);
  ASSERT_TRUE(coord.ok()) << coord.status();
  std::vector<std::unique_ptr<MemberClient>> clients;
  for (int r = 0; r < kWorld; ++r) {
    auto o = Member((*coord)->address(), r);
    o.shard_status = [] { return MemberShardStatus{true, 7, 0}; };
    auto c = MemberClient::Join(o);
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(*std::move(c));
  }
  const int64_t old_epoch = MakeReady(clients, 1, 7);

  opts.listen = (*coord)->address();
  coord->reset();  // The coordinator goes away with all its state.
  auto restarted = InProcessCoordinator::Start(opts);
  ASSERT_TRUE(restarted.ok()) << restarted.status();

  const int64_t new_epoch = MakeReady(clients, old_epoch + 1, 7);
  EXPECT_GT(new_epoch, old_epoch);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(clients[r]->rank(), r);
    EXPECT_EQ(clients[r]->view().joins, 2) << r;
  }
  const ClusterSnapshot s = (*restarted)->manager().Snapshot();
  EXPECT_TRUE(s.ready);
  // Rebuilt from what the members gave back.
  EXPECT_EQ(s.committed_step, 7);
  for (const SlotRecord& slot : s.slots) {
    EXPECT_EQ(slot.identity, absl::StrCat("node-", slot.rank));
    EXPECT_TRUE(slot.holds_shard);
  }
}

TEST(MemberClientTest, JoinOfAHeldSlotFailsWithAlreadyExists) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto first = MemberClient::Join(Member((*coord)->address(), 1));
  ASSERT_TRUE(first.ok()) << first.status();
  auto other = Member((*coord)->address(), 1);
  other.identity = "intruder";
  auto second = MemberClient::Join(other);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists)
      << second.status();
}

TEST(MemberClientTest, LeaveEmptiesTheSlotAndStartsAnEpoch) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto a = MemberClient::Join(Member((*coord)->address(), 0));
  auto b = MemberClient::Join(Member((*coord)->address(), 1));
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t before = (*coord)->manager().Snapshot().epoch;
  ASSERT_TRUE((*b)->Leave("test").ok());
  auto v = (*a)->WaitFor(
      [&](const MembershipView& v) {
        return v.epoch > before && v.LiveCount() == 1;
      },
      Deadline());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*coord)->manager().Snapshot().slots[1].phase, MemberPhase::kLeft);
}

TEST(MemberClientTest, StaleEpochFailureReportIsAborted) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto a = MemberClient::Join(Member((*coord)->address(), 0));
  auto b = MemberClient::Join(Member((*coord)->address(), 1));
  ASSERT_TRUE(a.ok() && b.ok());
  // Epoch 1 is the forming epoch both joined; a leave moves past it.
  auto c = MemberClient::Join(Member((*coord)->address(), 2));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Leave("test").ok());
  ASSERT_GT((*coord)->manager().Snapshot().epoch, 1);
  auto out = (*a)->ReportFailure(1, pb::FAILURE_KIND_COLLECTIVE_FAILED, "test",
                                 /*epoch=*/1);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted) << out.status();
}

TEST(MemberClientTest, WaitForTimesOutAtItsDeadline) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto a = MemberClient::Join(Member((*coord)->address(), 0));
  ASSERT_TRUE(a.ok());
  const MonoTime start = MonoNow();
  auto v = (*a)->WaitForEpochReady(1, start + absl::Milliseconds(200));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(MonoNow() - start, absl::Seconds(2));
}

TEST(MemberClientTest, DestructorReturnsPromptlyWhileTheCoordinatorIsGone) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(500)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto a = MemberClient::Join(Member((*coord)->address(), 0));
  ASSERT_TRUE(a.ok());
  coord->reset();
  // Let the heartbeat thread run into the outage.
  auto v = (*a)->WaitFor(
      [](const MembershipView& v) {
        return MonoNow() - v.last_contact > absl::Milliseconds(700);
      },
      MonoNow() + absl::Seconds(3));
  (void)v;  // Either way, destruction must be prompt.
  const MonoTime start = MonoNow();
  a->reset();
  EXPECT_LT(MonoNow() - start, absl::Seconds(1));
}

TEST(MemberClientTest, ViewSaysWhichProcessHoldsASlot) {
  MembershipView v;
  v.world_size = 2;
  pb::MemberInfo m;
  m.set_rank(1);
  m.set_incarnation("b");
  v.members.push_back(m);
  EXPECT_TRUE(v.HeldBy(1, "b"));
  EXPECT_FALSE(v.HeldBy(1, "a"));  // A successor holds it.
  EXPECT_FALSE(v.HeldBy(0, "b"));  // Vacant.
}

// The reachability reports of a simulated network, for each member's
// heartbeats: while `cut` is set, rank `cut` and everyone else report each
// other unreachable; while `link` is set, its two ends report each other.
struct Network {
  absl::Mutex mu;
  int cut = -1;
  std::pair<int, int> link = {-1, -1};
  std::vector<std::string> incarnations;

  std::vector<pb::UnreachablePeer> ReportOf(int rank) {
    absl::MutexLock lock(&mu);
    std::vector<pb::UnreachablePeer> out;
    for (int r = 0; r < static_cast<int>(incarnations.size()); ++r) {
      const bool on_link = (rank == link.first && r == link.second) ||
                           (rank == link.second && r == link.first);
      const bool across_cut =
          cut >= 0 && r != rank && (rank == cut || r == cut);
      if (!on_link && !across_cut) continue;
      pb::UnreachablePeer p;
      p.set_rank(r);
      p.set_incarnation(incarnations[r]);
      p.set_failed_probes(3);
      p.set_error("connect: Network is unreachable");
      out.push_back(p);
    }
    return out;
  }

  // Who holds each rank, so that reports name them (once all joined).
  void Learn(const std::vector<std::unique_ptr<MemberClient>>& clients) {
    absl::MutexLock lock(&mu);
    incarnations.clear();
    for (const auto& c : clients) incarnations.push_back(c->incarnation());
  }
};

// Joins kWorld members whose heartbeats carry `network`'s reports.
void JoinAll(Network& network, const std::string& address,
             std::vector<std::unique_ptr<MemberClient>>* clients) {
  for (int r = 0; r < kWorld; ++r) {
    MemberClientOptions o = Member(address, r);
    o.unreachable_peers = [&network, r] { return network.ReportOf(r); };
    auto c = MemberClient::Join(o);
    ASSERT_TRUE(c.ok()) << c.status();
    clients->push_back(*std::move(c));
  }
}

TEST(MemberClientTest,
     MemberCutOffFromPeersIsRemovedAndRejoinsAfterQuarantine) {
  InProcessCoordinatorOptions options =
      Options(absl::Milliseconds(1500), absl::Milliseconds(100));
  options.coordinator.membership.partition_quarantine = absl::Seconds(2);
  auto coord = InProcessCoordinator::Start(options);
  ASSERT_TRUE(coord.ok()) << coord.status();
  Network network;
  std::vector<std::unique_ptr<MemberClient>> clients;
  ASSERT_NO_FATAL_FAILURE(JoinAll(network, (*coord)->address(), &clients));
  const int64_t epoch = MakeReady(clients, 1);
  network.Learn(clients);
  {
    absl::MutexLock lock(&network.mu);
    network.cut = 2;
  }
  auto removed = clients[0]->WaitFor(
      [&](const MembershipView& v) {
        return v.epoch > epoch && v.LiveCount() == kWorld - 1;
      },
      Deadline());
  ASSERT_TRUE(removed.ok()) << removed.status();
  const MonoTime removed_at = MonoNow();
  for (const pb::MemberInfo& m : removed->members) EXPECT_NE(m.rank(), 2);
  // The partition heals; rank 2 keeps trying (its membership did not end)
  // and gets back in once the quarantine is over.
  {
    absl::MutexLock lock(&network.mu);
    network.cut = -1;
  }
  EXPECT_TRUE(clients[2]->view().error.ok()) << clients[2]->view().error;
  auto back = clients[2]->WaitFor(
      [&](const MembershipView& v) { return v.joins == 2 && v.AllLive(); },
      Deadline());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_GE(MonoNow() - removed_at, absl::Milliseconds(1500));
  const ClusterSnapshot s = (*coord)->manager().Snapshot(1000);
  bool cut_off = false, refused = false;
  for (const Decision& d : s.decisions) {
    if (d.kind == DecisionKind::kMemberRemoved &&
        d.reason.find("rank 2 cut off from its peers") != std::string::npos) {
      cut_off = true;
    }
    if (d.kind == DecisionKind::kJoinRejected &&
        d.reason.find("quarantined") != std::string::npos) {
      refused = true;
    }
  }
  EXPECT_TRUE(cut_off);
  EXPECT_TRUE(refused);
  // GetClusterState shows the (now past) quarantine of rank 2's address.
  auto stub = pb::Coordinator::NewStub(grpc::CreateChannel(
      (*coord)->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  rpc::SetDeadline(&context, Deadline());
  pb::ClusterState state;
  ASSERT_TRUE(
      stub->GetClusterState(&context, pb::GetClusterStateRequest(), &state)
          .ok());
  ASSERT_EQ(state.quarantines_size(), 1);
  EXPECT_EQ(state.quarantines(0).peer_address(), "127.0.0.1:20002");
  EXPECT_EQ(state.quarantines(0).removals(), 1);
  EXPECT_NE(state.quarantines(0).reason().find("cut off"), std::string::npos);
  // The others never lost their slots.
  for (int r : {0, 1, 3}) EXPECT_EQ(clients[r]->view().joins, 1) << r;
}

// One link down both ways: nobody can be blamed, nobody is removed, and
// GetClusterState lists the link until it is mended.
TEST(MemberClientTest, ClusterStateListsABrokenLinkNoRemovalExplains) {
  auto coord = InProcessCoordinator::Start(
      Options(absl::Milliseconds(1500), absl::Milliseconds(100)));
  ASSERT_TRUE(coord.ok()) << coord.status();
  Network network;
  std::vector<std::unique_ptr<MemberClient>> clients;
  ASSERT_NO_FATAL_FAILURE(JoinAll(network, (*coord)->address(), &clients));
  const int64_t epoch = MakeReady(clients, 1);
  network.Learn(clients);
  {
    absl::MutexLock lock(&network.mu);
    network.link = {0, 1};
  }
  auto stub = pb::Coordinator::NewStub(grpc::CreateChannel(
      (*coord)->address(), grpc::InsecureChannelCredentials()));
  // Polls GetClusterState (with a deadline) until `done`.
  auto wait_for_state =
      [&](const std::function<bool(const pb::ClusterState&)>& done) {
        pb::ClusterState state;
        const MonoTime deadline = Deadline();
        while (MonoNow() < deadline) {
          grpc::ClientContext context;
          rpc::SetDeadline(&context, deadline);
          state.Clear();
          if (stub->GetClusterState(&context, pb::GetClusterStateRequest(),
                                    &state)
                  .ok() &&
              done(state)) {
            return state;
          }
          absl::SleepFor(absl::Milliseconds(20));  // Polling, with a deadline.
        }
        ADD_FAILURE() << "GetClusterState never got there: "
                      << state.DebugString();
        return state;
      };
  const pb::ClusterState down = wait_for_state(
      [](const pb::ClusterState& s) { return s.broken_links_size() > 0; });
  ASSERT_EQ(down.broken_links_size(), 1);
  EXPECT_EQ(down.broken_links(0).rank_a(), 0);
  EXPECT_EQ(down.broken_links(0).rank_b(), 1);
  EXPECT_EQ(down.epoch(), epoch);
  {
    absl::MutexLock lock(&network.mu);
    network.link = {-1, -1};
  }
  const pb::ClusterState mended = wait_for_state(
      [](const pb::ClusterState& s) { return s.broken_links_size() == 0; });
  EXPECT_EQ(mended.epoch(), epoch);
  for (const auto& c : clients) EXPECT_EQ(c->view().joins, 1);
}

}  // namespace
}  // namespace shardd::coordinator
