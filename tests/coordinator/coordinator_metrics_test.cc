// The coordinator binary's /metrics (--metrics_port): scraped over HTTP
// while W = 4 member processes join and one is SIGKILLed; every scrape
// passes `promtool check metrics`.
#include <signal.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/http_get.h"
#include "daemon/metrics/promtool.h"
#include "gtest/gtest.h"
#include "tests/coordinator/process_cluster.h"
#include "tests/coordinator/test_main.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;

constexpr int kWorld = 4;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

ProcessClusterOptions MetricsCluster() {
  ProcessClusterOptions o;
  o.coordinator_binary = TestBinaries().coordinator;
  o.member_binary = TestBinaries().member;
  o.world_size = kWorld;
  o.sharding_factor = 2;
  o.lease_ms = 1500;
  o.heartbeat_interval_ms = 500;
  o.metrics = true;
  return o;
}

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  CoordinatorMetricsTest() : cluster_(MetricsCluster()) {}

  // One scrape of /metrics, checked by promtool and parsed.
  std::map<std::string, double> Scrape() {
    absl::StatusOr<std::string> body =
        metrics::HttpGet("127.0.0.1", cluster_.metrics_port(), "/metrics",
                         In(absl::Seconds(10)));
    EXPECT_TRUE(body.ok()) << body.status();
    if (!body.ok()) return {};
    const absl::Status check = metrics::PromtoolCheckMetrics(*body);
    EXPECT_TRUE(check.ok()) << check << "\n" << *body;
    auto samples = metrics::ParseExposition(*body);
    EXPECT_TRUE(samples.ok()) << samples.status() << "\n" << *body;
    return samples.ok() ? *samples : std::map<std::string, double>{};
  }

  static double Failures(const std::map<std::string, double>& s,
                         const std::string& cause) {
    const auto it = s.find(absl::StrCat(
        "shardd_coordinator_failures_detected_total{cause=\"", cause, "\"}"));
    return it == s.end() ? -1 : it->second;
  }

  ProcessCluster cluster_;
};

TEST_F(CoordinatorMetricsTest,
       ServesMembershipAndProcessMetricsThroughAFailure) {
  ASSERT_TRUE(cluster_.StartCoordinator().ok());
  ASSERT_GT(cluster_.metrics_port(), 0);
  ASSERT_NE(cluster_.metrics_port(), cluster_.port());

  // Before anyone joins.
  auto s = Scrape();
  EXPECT_EQ(s["shardd_coordinator_members_live"], 0);
  EXPECT_EQ(s["shardd_coordinator_members_expected"], kWorld);
  EXPECT_EQ(s["shardd_coordinator_ready"], 0);
  EXPECT_EQ(s["shardd_coordinator_lease_seconds"], 1.5);
  EXPECT_EQ(Failures(s, "lease_expired"), 0);
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_start_time_seconds",
        "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(s.count(name), 1u) << name;
  }
  EXPECT_GT(s["process_resident_memory_bytes"], 0);
  EXPECT_LE(s["process_start_time_seconds"],
            absl::ToUnixSeconds(absl::Now()) + 1);

  // Four members join; the job becomes ready.
  for (int r = 0; r < kWorld; ++r) {
    auto m = cluster_.StartMember(r, absl::StrCat("node-", r), false,
                                  In(absl::Seconds(20)));
    ASSERT_TRUE(m.ok()) << m.status();
  }
  auto ready = cluster_.WaitForReady(0, In(absl::Seconds(20)));
  ASSERT_TRUE(ready.ok()) << ready.status();
  s = Scrape();
  EXPECT_EQ(s["shardd_coordinator_members_live"], kWorld);
  EXPECT_EQ(s["shardd_coordinator_ready"], 1);
  EXPECT_EQ(s["shardd_coordinator_membership_epoch"], ready->epoch());

  // SIGKILL one: its lease runs out; one failure, cause lease_expired.
  cluster_.members()[2]->Signal(SIGKILL);
  auto failed = cluster_.WaitForState(
      [](const pb::ClusterState& st) {
        return st.slots(2).state() == pb::MEMBER_STATE_FAILED;
      },
      In(absl::Seconds(10)), "showing rank 2 FAILED");
  ASSERT_TRUE(failed.ok()) << failed.status();
  s = Scrape();
  auto after = cluster_.State();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(Failures(s, "lease_expired"), 1);
  for (const char* cause :
       {"collective_failed", "collective_timeout", "peer_unreachable",
        "transfer_failed", "process_exited"}) {
    EXPECT_EQ(Failures(s, cause), 0) << cause;
  }
  EXPECT_EQ(s["shardd_coordinator_members_live"], kWorld - 1);
  EXPECT_EQ(s["shardd_coordinator_ready"], 0);
  EXPECT_EQ(s["shardd_coordinator_membership_epoch"], after->epoch());
  EXPECT_GT(after->epoch(), ready->epoch());
}

}  // namespace
}  // namespace shardd::tests
