#include "daemon/node/peer_reachability.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// The membership and the network as the test sets them; probes answer
// from `down` (address -> error).
class PeerReachabilityTest : public ::testing::Test {
 protected:
  PeerReachabilityTest() {
    options_.interval = absl::Milliseconds(10);
    options_.timeout = absl::Seconds(5);
    options_.failures_to_report = 3;
  }

  std::unique_ptr<PeerReachability> Make() {
    return std::make_unique<PeerReachability>(
        options_,
        [this](const std::vector<std::string>& addresses, MonoTime) {
          absl::MutexLock lock(&mu_);
          std::vector<absl::Status> out;
          for (const std::string& address : addresses) {
            ++probes_;
            auto it = down_.find(address);
            out.push_back(it == down_.end()
                              ? absl::OkStatus()
                              : absl::UnavailableError(it->second));
          }
          return out;
        },
        [this] {
          absl::MutexLock lock(&mu_);
          return targets_;
        },
        [this](const UnreachablePeerReport& p, bool unreachable) {
          absl::MutexLock lock(&mu_);
          changes_.push_back({p.rank, unreachable});
        });
  }

  void SetDown(const std::string& address, bool down) {
    absl::MutexLock lock(&mu_);
    if (down) {
      down_[address] = "connect: Network is unreachable";
    } else {
      down_.erase(address);
    }
  }

  PeerReachabilityOptions options_;
  absl::Mutex mu_;
  std::vector<ProbeTarget> targets_ = {
      {0, "10.0.0.1:7070", "inc-0"},
      {2, "10.0.0.3:7070", "inc-2"},
      {3, "10.0.0.4:7070", "inc-3"},
  };
  std::map<std::string, std::string> down_;
  std::vector<std::pair<int, bool>> changes_;
  int probes_ = 0;
};

TEST_F(PeerReachabilityTest, ReportsAPeerAfterConsecutiveFailures) {
  auto r = Make();
  SetDown("10.0.0.3:7070", true);
  r->RunRound();
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
  r->RunRound();
  const std::vector<UnreachablePeerReport> u = r->Unreachable();
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].rank, 2);
  EXPECT_EQ(u[0].incarnation, "inc-2");
  EXPECT_EQ(u[0].failed_probes, 3);
  EXPECT_EQ(u[0].error, "connect: Network is unreachable");
  EXPECT_EQ(changes_, (std::vector<std::pair<int, bool>>{{2, true}}));
}

TEST_F(PeerReachabilityTest, PeersListsEveryProbedPeerWithItsCounts) {
  auto r = Make();
  EXPECT_TRUE(r->Peers().empty());  // No round yet.
  r->RunRound();
  SetDown("10.0.0.3:7070", true);
  for (int i = 0; i < 3; ++i) r->RunRound();
  const std::vector<PeerProbeState> peers = r->Peers();
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[0].rank, 0);
  EXPECT_EQ(peers[0].address, "10.0.0.1:7070");
  EXPECT_EQ(peers[0].incarnation, "inc-0");
  EXPECT_EQ(peers[0].probes_answered, 4);
  EXPECT_EQ(peers[0].consecutive_failures, 0);
  EXPECT_FALSE(peers[0].reported);
  EXPECT_EQ(peers[1].rank, 2);
  EXPECT_EQ(peers[1].probes_answered, 1);
  EXPECT_EQ(peers[1].consecutive_failures, 3);
  EXPECT_EQ(peers[1].last_error, "connect: Network is unreachable");
  EXPECT_TRUE(peers[1].reported);
  // Answering again clears the failures; the last error stays on record.
  SetDown("10.0.0.3:7070", false);
  r->RunRound();
  const PeerProbeState again = r->Peers()[1];
  EXPECT_EQ(again.probes_answered, 2);
  EXPECT_EQ(again.consecutive_failures, 0);
  EXPECT_FALSE(again.reported);
  EXPECT_EQ(again.last_error, "connect: Network is unreachable");
}

TEST_F(PeerReachabilityTest, ASuccessfulProbeStartsTheCountAgain) {
  auto r = Make();
  SetDown("10.0.0.3:7070", true);
  r->RunRound();
  r->RunRound();
  SetDown("10.0.0.3:7070", false);
  r->RunRound();
  SetDown("10.0.0.3:7070", true);
  r->RunRound();
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
  r->RunRound();
  EXPECT_EQ(r->Unreachable().size(), 1u);
  // Reachable again: no longer reported, and the change is told.
  SetDown("10.0.0.3:7070", false);
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
  EXPECT_EQ(changes_,
            (std::vector<std::pair<int, bool>>{{2, true}, {2, false}}));
}

TEST_F(PeerReachabilityTest, ANewIncarnationOrAddressStartsFromZero) {
  auto r = Make();
  SetDown("10.0.0.3:7070", true);
  for (int i = 0; i < 3; ++i) r->RunRound();
  ASSERT_EQ(r->Unreachable().size(), 1u);
  {
    absl::MutexLock lock(&mu_);
    targets_[1].incarnation = "inc-2b";  // A replacement, same address.
  }
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
  {
    absl::MutexLock lock(&mu_);
    targets_[1].address = "10.0.0.9:7070";  // And at another address.
  }
  SetDown("10.0.0.9:7070", true);
  r->RunRound();
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
}

TEST_F(PeerReachabilityTest, APeerGoneFromTheMembershipIsForgotten) {
  auto r = Make();
  SetDown("10.0.0.3:7070", true);
  for (int i = 0; i < 3; ++i) r->RunRound();
  ASSERT_EQ(r->Unreachable().size(), 1u);
  std::vector<ProbeTarget> all;
  {
    absl::MutexLock lock(&mu_);
    all = targets_;
    targets_.erase(targets_.begin() + 1);
  }
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
  // Back in the membership (re-joined), still cut off: three more probes
  // before it is reported again, not one.
  {
    absl::MutexLock lock(&mu_);
    targets_ = all;
  }
  r->RunRound();
  EXPECT_TRUE(r->Unreachable().empty());
}

TEST_F(PeerReachabilityTest, ProbesEveryTargetAtOnceWithTheTimeout) {
  // One call for the round (the probe runs them in parallel): every
  // target's address, and a deadline `timeout` from now.
  std::vector<std::vector<std::string>> calls;
  absl::Duration left;
  PeerReachability r(
      options_,
      [&](const std::vector<std::string>& addresses, MonoTime deadline) {
        calls.push_back(addresses);
        left = deadline - MonoNow();
        return std::vector<absl::Status>(addresses.size());
      },
      [this] {
        absl::MutexLock lock(&mu_);
        return targets_;
      });
  r.RunRound();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::vector<std::string>{
                          "10.0.0.1:7070", "10.0.0.3:7070", "10.0.0.4:7070"}));
  EXPECT_GT(left, absl::Seconds(4));
  EXPECT_LE(left, absl::Seconds(5));
}

TEST_F(PeerReachabilityTest, AResultOfTheWrongLengthFailsEveryProbe) {
  PeerReachabilityOptions o = options_;
  o.failures_to_report = 1;
  PeerReachability r(
      o,
      [](const std::vector<std::string>&, MonoTime) {
        return std::vector<absl::Status>(1);  // Three asked.
      },
      [this] {
        absl::MutexLock lock(&mu_);
        return targets_;
      });
  r.RunRound();
  const std::vector<UnreachablePeerReport> u = r.Unreachable();
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].error, "the probe returned 1 results for 3 peers");
}

TEST_F(PeerReachabilityTest, TheThreadProbesUntilStopped) {
  auto r = Make();
  SetDown("10.0.0.1:7070", true);
  r->Start();
  {
    absl::MutexLock lock(&mu_);
    auto reported = [this] { return !changes_.empty(); };
    ASSERT_TRUE(
        mu_.AwaitWithTimeout(absl::Condition(&reported), absl::Seconds(30)));
  }
  r->Stop();
  EXPECT_EQ(r->Unreachable().size(), 1u);
  int after_stop;
  {
    absl::MutexLock lock(&mu_);
    after_stop = probes_;
  }
  r->RunRound();  // Still usable by hand; the thread is gone.
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(probes_, after_stop + 3);
}

TEST_F(PeerReachabilityTest, ZeroIntervalStartsNothing) {
  options_.interval = absl::ZeroDuration();
  auto r = Make();
  r->Start();
  r->Stop();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(probes_, 0);
}

TEST(GroupPeersTest, ProbesTheShardAndReplicaGroupsOnly) {
  // W = 8, F = 4: rank 5's shard group is 4..7, its replica group {1, 5}.
  std::vector<ProbeTarget> members;
  for (int r = 0; r < 8; ++r) {
    members.push_back({r, "10.0.0." + std::to_string(r + 1) + ":7070", "i"});
  }
  std::vector<int> ranks;
  for (const ProbeTarget& t : GroupPeers(5, 4, members))
    ranks.push_back(t.rank);
  EXPECT_EQ(ranks, (std::vector<int>{1, 4, 6, 7}));
  // F = 1 (no sharding): the replica group is everyone; F = W: likewise.
  EXPECT_EQ(GroupPeers(0, 1, members).size(), 7u);
  EXPECT_EQ(GroupPeers(0, 8, members).size(), 7u);
  // Members missing from the view (a vacant slot) are not probed.
  members.erase(members.begin() + 1);
  EXPECT_EQ(GroupPeers(5, 4, members).size(), 3u);
  EXPECT_TRUE(GroupPeers(5, 0, members).empty());
}

}  // namespace
}  // namespace shardd::node
