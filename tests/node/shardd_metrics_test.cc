// The shardd binary's /metrics (--metrics_port): a coordinator and one
// daemon (W = 1) on 127.0.0.1; the scrape passes `promtool check metrics`
// and a metrics port in use stops the daemon with a clear error.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/http_get.h"
#include "daemon/metrics/promtool.h"
#include "daemon/testing/subprocess.h"
#include "gtest/gtest.h"

namespace shardd::tests {

std::string g_coordinator_binary;
std::string g_shardd_binary;

namespace {

absl::Time In(absl::Duration d) { return absl::Now() + d; }

class ShardMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short paths: Unix socket paths are limited to 108 bytes.
    char tmpl[] = "/tmp/shardd-metrics-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto c = Subprocess::Spawn({g_coordinator_binary, "--listen=127.0.0.1:0",
                                "--world_size=1", "--sharding_factor=1"},
                               "coordinator");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    auto line = coordinator_->WaitForLine("coordinator listening on",
                                          In(absl::Seconds(20)));
    ASSERT_TRUE(line.ok()) << line.status();
    // "coordinator listening on HOST:PORT (...)".
    const std::string rest = line->substr(line->find(" on ") + 4);
    address_ = rest.substr(0, rest.find(' '));
  }

  void TearDown() override {
    daemon_.reset();  // SIGKILLs it if it still runs.
    coordinator_.reset();
    unlink((dir_ + "/shardd.sock").c_str());
    rmdir(dir_.c_str());
  }

  absl::StatusOr<std::unique_ptr<Subprocess>> StartDaemon(
      const std::string& metrics_port) {
    return Subprocess::Spawn(
        {g_shardd_binary, absl::StrCat("--coordinator=", address_),
         "--identity=node-0", "--rank=0", absl::StrCat("--shm_dir=", dir_),
         "--peer_listen=127.0.0.1:0",
         absl::StrCat("--metrics_port=", metrics_port),
         "--metrics_address=127.0.0.1"},
        "shardd");
  }

  std::string dir_;
  std::string address_;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<Subprocess> daemon_;
};

TEST_F(ShardMetricsTest, ServesNodeAndProcessMetricsThatPromtoolAccepts) {
  auto d = StartDaemon("-1");
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  ASSERT_TRUE(
      daemon_->WaitForLine("shardd rank 0", In(absl::Seconds(30))).ok());
  // "shardd metrics on 127.0.0.1:PORT", right after the listening line.
  auto line = daemon_->WaitForLine("shardd metrics on", In(absl::Seconds(5)));
  ASSERT_TRUE(line.ok()) << line.status();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line->substr(line->rfind(':') + 1), &port))
      << *line;
  EXPECT_NE(line->find("127.0.0.1:"), std::string::npos) << *line;

  auto body =
      metrics::HttpGet("127.0.0.1", port, "/metrics", In(absl::Seconds(10)));
  ASSERT_TRUE(body.ok()) << body.status();
  const absl::Status check = metrics::PromtoolCheckMetrics(*body);
  EXPECT_TRUE(check.ok()) << check << "\n" << *body;
  auto s = metrics::ParseExposition(*body);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->count("shardd_build_info{version=\"0.1.0\"}"), 1u) << *body;
  for (const char* name :
       {"shardd_steps_committed_total", "shardd_membership_epoch",
        "shardd_ready", "shardd_gathered_bytes", "shardd_planned_bytes",
        "shardd_shard_bytes{kind=\"parameters\"}",
        "shardd_collective_failures_total{group=\"shard\",op=\"all_gather\"}",
        "process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_start_time_seconds",
        "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(s->count(name), 1u) << name << "\n" << *body;
  }
  EXPECT_EQ(s->at("shardd_checkpoint_last_written_timestamp_seconds"), 0)
      << "no checkpoint written yet";
}

TEST_F(ShardMetricsTest, AMetricsPortInUseStopsTheDaemonWithExitCode2) {
  // The coordinator's own gRPC port is certainly in use.
  const std::string port = address_.substr(address_.rfind(':') + 1);
  auto d = StartDaemon(port);
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  auto code = daemon_->Wait(In(absl::Seconds(20)));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2);
  EXPECT_TRUE(daemon_->lines().empty()) << "it must not claim to listen";
}

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s COORDINATOR_BINARY SHARDD_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::g_coordinator_binary = argv[1];
  shardd::tests::g_shardd_binary = argv[2];
  return RUN_ALL_TESTS();
}
