#include "daemon/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/http_get.h"
#include "daemon/metrics/promtool.h"
#include "gtest/gtest.h"
#include "prometheus/client_metric.h"
#include "prometheus/counter.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace shardd::metrics {
namespace {

absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

// A gauge computed at collection time.
class Constant : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily f;
    f.name = "shardd_test_constant";
    f.help = "A test gauge.";
    f.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric m;
    m.gauge.value = 42;
    f.metric.push_back(m);
    return {f};
  }
};

class MetricsServerTest : public ::testing::Test {
 protected:
  MetricsServerTest() : registry_(std::make_shared<prometheus::Registry>()) {
    prometheus::BuildCounter()
        .Name("shardd_test_things_total")
        .Help("Things.")
        .Register(*registry_)
        .Add({{"kind", "a"}})
        .Increment(3);
  }

  std::shared_ptr<prometheus::Registry> registry_;
};

TEST_F(MetricsServerTest, ServesTheRegistryAndProcessMetricsOverHttp) {
  auto server = MetricsServer::Start("127.0.0.1", 0, registry_);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1");
  auto body = HttpGet("127.0.0.1", (*server)->port(), "/metrics", Deadline());
  ASSERT_TRUE(body.ok()) << body.status();
  auto samples = ParseExposition(*body);
  ASSERT_TRUE(samples.ok()) << samples.status() << "\n" << *body;
  EXPECT_EQ(samples->at("shardd_test_things_total{kind=\"a\"}"), 3);
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_start_time_seconds",
        "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(samples->count(name), 1u) << name << "\n" << *body;
  }
  EXPECT_GT(samples->at("process_resident_memory_bytes"), 0);
  const absl::Status check = PromtoolCheckMetrics(*body);
  EXPECT_TRUE(check.ok()) << check << "\n" << *body;
}

TEST_F(MetricsServerTest, ServesACollectableAddedLater) {
  auto server = MetricsServer::Start("127.0.0.1", 0, registry_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto before = HttpGet("127.0.0.1", (*server)->port(), "/metrics", Deadline());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_FALSE(absl::StrContains(*before, "shardd_test_constant"));
  (*server)->AddCollectable(std::make_shared<Constant>());
  auto after = HttpGet("127.0.0.1", (*server)->port(), "/metrics", Deadline());
  ASSERT_TRUE(after.ok()) << after.status();
  auto samples = ParseExposition(*after);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->at("shardd_test_constant"), 42);
}

TEST_F(MetricsServerTest, PortInUseIsAlreadyExistsNamingTheAddress) {
  auto first = MetricsServer::Start("127.0.0.1", 0, registry_);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto second = MetricsServer::Start("127.0.0.1", port, registry_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists)
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                absl::StrCat("127.0.0.1:", port)))
      << second.status();
  // The first one still serves.
  auto body = HttpGet("127.0.0.1", port, "/metrics", Deadline());
  EXPECT_TRUE(body.ok()) << body.status();
}

TEST_F(MetricsServerTest, RejectsBadArgumentsNamingThem) {
  auto high = MetricsServer::Start("127.0.0.1", 70000, registry_);
  EXPECT_EQ(high.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(high.status().message(), "70000"));
  auto negative = MetricsServer::Start("127.0.0.1", -1, registry_);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  auto name = MetricsServer::Start("localhost", 0, registry_);
  EXPECT_EQ(name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(name.status().message(), "'localhost'"));
  auto no_registry = MetricsServer::Start("127.0.0.1", 0, nullptr);
  EXPECT_EQ(no_registry.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MetricsServerTest, AnAddressNotOnThisMachineIsUnavailable) {
  // TEST-NET-1 (RFC 5737): never assigned to a local interface.
  auto server = MetricsServer::Start("192.0.2.1", 0, registry_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable)
      << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(), "192.0.2.1:0"))
      << server.status();
}

// Connections that never send a request (a stalled client, a half-open
// socket) each hold one of the server's threads; with civetweb's defaults
// two of them kept every scrape waiting 30 s. They are dropped after
// kRequestTimeout, and a scrape behind them is answered.
TEST_F(MetricsServerTest, IdleConnectionsDoNotBlockScrapes) {
  auto server = MetricsServer::Start("127.0.0.1", 0, registry_);
  ASSERT_TRUE(server.ok()) << server.status();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> idle;
  absl::Cleanup close_idle = [&idle] {
    for (int fd : idle) close(fd);
  };
  for (int i = 0; i < 2 * MetricsServer::kServerThreads; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  }
  // The idle ones take the threads in rounds of kServerThreads, each for
  // kRequestTimeout; then the scrape's turn comes.
  const absl::Time start = absl::Now();
  const int rounds =
      static_cast<int>(idle.size()) / MetricsServer::kServerThreads;
  auto body = HttpGet("127.0.0.1", (*server)->port(), "/metrics",
                      start + (rounds + 2) * MetricsServer::kRequestTimeout);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE(ParseExposition(*body).ok());
  std::printf("scrape behind %zu idle connections answered after %s\n",
              idle.size(), absl::FormatDuration(absl::Now() - start).c_str());
  // The server closed them: each reads end of file.
  for (int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1,
                   static_cast<int>(absl::ToInt64Milliseconds(
                       2 * MetricsServer::kRequestTimeout))),
              1);
    char byte;
    EXPECT_LE(recv(fd, &byte, 1, 0), 0);
  }
}

TEST_F(MetricsServerTest, StopsServingWhenDestroyed) {
  auto server = MetricsServer::Start("127.0.0.1", 0, registry_);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  server->reset();
  auto body = HttpGet("127.0.0.1", port, "/metrics", Deadline());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kUnavailable)
      << body.status();
}

}  // namespace
}  // namespace shardd::metrics
