#include "client/cluster_report.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::client {
namespace {

// 2026-12-04T18:00:00.000Z
constexpr int64_t kNowMs = 1796407200000;

v1::ClusterState ThreeMembers() {
  v1::ClusterState s;
  s.set_epoch(7);
  s.set_ready(false);
  s.set_world_size(4);
  s.set_sharding_factor(2);
  s.set_committed_step(12);
  s.set_lease_ms(1500);
  s.set_job_state(v1::JOB_STATE_RUNNING);
  for (int r = 0; r < 4; ++r) {
    v1::SlotState* slot = s.add_slots();
    slot->set_rank(r);
    if (r == 3) {
      slot->set_state(v1::MEMBER_STATE_EMPTY);
      continue;
    }
    slot->set_state(v1::MEMBER_STATE_READY);
    v1::MemberInfo* m = slot->mutable_member();
    m->set_rank(r);
    m->set_identity(absl::StrCat("node-", r));
    m->set_peer_address(absl::StrCat("10.0.0.", r, ":7000"));
    m->set_committed_step(12);
    m->set_device(v1::DEVICE_KIND_CPU);
    m->set_lease_expiry_unix_ms(kNowMs + 1200);
    if (r != 1) m->set_trainer_last_call_unix_ms(kNowMs - 300 - r * 20000);
  }
  v1::PeerLink* link = s.add_broken_links();
  link->set_rank_a(0);
  link->set_rank_b(2);
  // Most recent first, as the coordinator sends them.
  v1::Decision* undecided = s.add_decisions();
  undecided->set_time_unix_ms(kNowMs - 1000);
  undecided->set_epoch(7);
  undecided->set_kind(v1::DECISION_KIND_PARTITION_UNDECIDED);
  undecided->add_ranks(0);
  undecided->add_ranks(2);
  undecided->set_reason("link 0-2 down both ways; nobody removed");
  v1::Decision* joined = s.add_decisions();
  joined->set_time_unix_ms(kNowMs - 60000);
  joined->set_epoch(6);
  joined->set_kind(v1::DECISION_KIND_MEMBER_JOINED);
  joined->add_ranks(2);
  joined->set_reason("rank 2 joined");
  return s;
}

TEST(ClusterReportTest, ListsEveryRankWithStateAddressAndEpoch) {
  const std::string report =
      ClusterReport(ThreeMembers(), absl::FromUnixMillis(kNowMs));
  EXPECT_NE(report.find("job          RUNNING\n"), std::string::npos) << report;
  EXPECT_NE(report.find("epoch        7 (not ready)"), std::string::npos);
  EXPECT_NE(report.find("W = 4, F = 2"), std::string::npos);
  EXPECT_NE(report.find("members (epoch 7)"), std::string::npos);
  EXPECT_NE(report.find("0     READY       10.0.0.0:7000          node-0"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("3     EMPTY       -"), std::string::npos) << report;
  EXPECT_NE(report.find("CPU    300ms ago      1.2s"), std::string::npos)
      << report;
  // Rank 2's trainer went quiet; rank 1 has none attached.
  EXPECT_NE(report.find("CPU    40.3s ago      1.2s"), std::string::npos)
      << report;
  EXPECT_NE(report.find("CPU    none           1.2s"), std::string::npos)
      << report;
}

TEST(ClusterReportTest, NamesBothEndsOfEachBrokenLink) {
  const std::string report =
      ClusterReport(ThreeMembers(), absl::FromUnixMillis(kNowMs));
  EXPECT_NE(report.find("broken links: 1"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 0 (10.0.0.0:7000) <-x-> rank 2 (10.0.0.2:7000)"),
            std::string::npos)
      << report;
}

TEST(ClusterReportTest, SaysNoneWhenEveryLinkIsUp) {
  v1::ClusterState s = ThreeMembers();
  s.clear_broken_links();
  EXPECT_NE(ClusterReport(s, absl::FromUnixMillis(kNowMs))
                .find("broken links: none\n"),
            std::string::npos);
}

TEST(ClusterReportTest, DecisionsReadOldestFirstWithUtcTimes) {
  const std::string report =
      ClusterReport(ThreeMembers(), absl::FromUnixMillis(kNowMs));
  const size_t joined = report.find(
      "2026-12-04T17:59:00.000Z  epoch 6    MEMBER_JOINED            ranks "
      "[2]");
  const size_t undecided = report.find(
      "2026-12-04T17:59:59.000Z  epoch 7    PARTITION_UNDECIDED      ranks "
      "[0, 2]     link 0-2 down both ways; nobody removed");
  ASSERT_NE(joined, std::string::npos) << report;
  ASSERT_NE(undecided, std::string::npos) << report;
  EXPECT_LT(joined, undecided);
}

TEST(ClusterReportTest, FailedJobComesFirstWithItsReason) {
  v1::ClusterState s = ThreeMembers();
  s.set_job_state(v1::JOB_STATE_FAILED);
  s.set_job_failure("shard 1 lost at step 12");
  EXPECT_EQ(ClusterReport(s, absl::FromUnixMillis(kNowMs))
                .rfind("job          FAILED: shard 1 lost at step 12\n", 0),
            0u);
}

TEST(ClusterReportTest, ExpiredLeaseSaysHowLongAgo) {
  const std::string report =
      ClusterReport(ThreeMembers(), absl::FromUnixMillis(kNowMs + 3200));
  EXPECT_NE(report.find("expired 2s ago"), std::string::npos) << report;
}

}  // namespace
}  // namespace shardd::client
