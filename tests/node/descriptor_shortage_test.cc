// A coordinator and a shardd that run out of file descriptors keep their
// listeners: once descriptors are free again, connections that waited in a
// listener's queue meanwhile are served, with no new connection needed to
// wake it (rpc::AcceptRetry; gRPC 1.51 alone closes a listener for good at
// the first EMFILE). Real binaries on 127.0.0.1; the shortage is made with
// prlimit(2) on the running process and a flood of real connections.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/http_get.h"
#include "daemon/testing/health_check.h"
#include "daemon/testing/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace shardd::tests {

std::string g_coordinator_binary;
std::string g_shardd_binary;

namespace {

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// Descriptors `pid` has open.
int OpenDescriptors(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

// CPU time `pid` has used (user + system), from /proc/PID/stat.
absl::Duration CpuTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command (which may hold spaces) in parentheses; utime
  // and stime are fields 14 and 15 of the line, 12 and 13 after it.
  std::vector<std::string> f =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime)) {
    return absl::InfiniteDuration();
  }
  return absl::Seconds(static_cast<double>(utime + stime) /
                       static_cast<double>(sysconf(_SC_CLK_TCK)));
}

// Connections waiting to be accepted on the TCP listener of `port` (the
// rx_queue of a LISTEN row in /proc/net/tcp{,6}); -1 when none listens.
int ListenQueue(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // Header.
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 5 || f[3] != "0A") continue;  // 0A: LISTEN.
      const std::string& local = f[1];
      int local_port = 0;
      if (!absl::SimpleHexAtoi(local.substr(local.rfind(':') + 1),
                               &local_port) ||
          local_port != port) {
        continue;
      }
      int queued = 0;
      if (absl::SimpleHexAtoi(f[4].substr(f[4].find(':') + 1), &queued)) {
        return queued;
      }
    }
  }
  return -1;
}

bool Eventually(const std::function<bool()>& done, absl::Duration within) {
  const absl::Time deadline = In(within);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));  // Polling with a deadline.
  }
  return done();
}

// Health/Check ("", the server) at `address` on a connection of its own:
// the serving status, or the call's status (UNAVAILABLE or
// DEADLINE_EXCEEDED: the server was not reached; UNIMPLEMENTED, where no
// health service is registered, came from the server).
absl::StatusOr<int> Reach(const std::string& address, absl::Duration deadline) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);  // A new connection.
  // Its connect attempt lasts longer than the call: no reconnection (a new
  // connection, which would wake the listener by itself) within the call;
  // only the listener's retry can serve a connection that waited queued.
  args.SetInt("grpc.min_reconnect_backoff_ms", 60000);
  return CheckHealth(grpc::CreateCustomChannel(
                         address, grpc::InsecureChannelCredentials(), args),
                     "", deadline);
}

bool Reached(const absl::StatusOr<int>& answer) {
  return answer.ok() || (!absl::IsUnavailable(answer.status()) &&
                         !absl::IsDeadlineExceeded(answer.status()));
}

int ConnectTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int ConnectUnix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int PortOf(const std::string& address) {
  int port = 0;
  return absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port) ? port
                                                                         : -1;
}

class DescriptorShortageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardd-fds-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto c =
        Subprocess::Spawn({g_coordinator_binary, "--listen=127.0.0.1:0",
                           "--world_size=1", "--sharding_factor=1",
                           "--metrics_port=-1", "--metrics_address=127.0.0.1"},
                          "coordinator");
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    auto line = coordinator_->WaitForLine("coordinator listening on",
                                          In(absl::Seconds(20)));
    ASSERT_TRUE(line.ok()) << line.status();
    const std::string rest = line->substr(line->find(" on ") + 4);
    coordinator_address_ = rest.substr(0, rest.find(' '));
    // "coordinator metrics on 127.0.0.1:PORT", right after it.
    auto metrics = coordinator_->WaitForLine("coordinator metrics on",
                                             In(absl::Seconds(5)));
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_port_ = PortOf(*metrics);
  }

  // The coordinator's /metrics, parsed.
  absl::StatusOr<std::map<std::string, double>> Scrape() {
    absl::StatusOr<std::string> body = metrics::HttpGet(
        "127.0.0.1", metrics_port_, "/metrics", In(absl::Seconds(10)));
    if (!body.ok()) return body.status();
    return metrics::ParseExposition(*body);
  }

  void TearDown() override {
    Release();
    daemon_.reset();  // SIGKILLs it if it still runs.
    coordinator_.reset();
    unlink(socket_path().c_str());
    rmdir(dir_.c_str());
  }

  std::string socket_path() const { return dir_ + "/shardd.sock"; }

  // Caps `pid`'s open files (soft and hard) a few above what it has open,
  // then fills its table with `connect` (one more connection each call)
  // until it has no descriptor left.
  void FillDescriptorTable(pid_t pid, const std::function<int()>& connect) {
    const int open_now = OpenDescriptors(pid);
    ASSERT_GT(open_now, 0);
    const rlim_t cap = static_cast<rlim_t>(open_now + 8);
    const rlimit limit{cap, cap};
    ASSERT_EQ(prlimit(pid, RLIMIT_NOFILE, &limit, nullptr), 0)
        << std::strerror(errno);
    for (int i = 0; i < 40; ++i) {
      const int fd = connect();
      ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
      flood_.push_back(fd);
    }
    ASSERT_TRUE(Eventually(
        [&] { return OpenDescriptors(pid) >= static_cast<int>(cap); },
        absl::Seconds(20)))
        << OpenDescriptors(pid) << " open of " << cap;
  }

  void Release() {
    for (int fd : flood_) close(fd);
    flood_.clear();
  }

  // Calls Reach(address) on a thread once `port`'s queue holds the flood's
  // unaccepted connections, waits until the call's connection is queued
  // behind them (the process cannot accept it), releases the flood, and
  // returns the call's code; `served_after` is how long after the release
  // it came back.
  absl::StatusOr<int> ReachAcrossTheShortage(const std::string& address,
                                             int port,
                                             absl::Duration* served_after) {
    const int queued_before = ListenQueue(port);
    EXPECT_GE(queued_before, 0) << "nothing listens on port " << port;
    absl::StatusOr<int> answer = absl::UnknownError("not called");
    absl::Time answered;
    std::thread call([&] {
      answer = Reach(address, absl::Seconds(30));
      answered = absl::Now();
    });
    const bool queued = Eventually(
        [&] { return ListenQueue(port) > queued_before; }, absl::Seconds(20));
    EXPECT_TRUE(queued) << "the call's connection never queued on " << port;
    const absl::Time released = absl::Now();
    Release();
    call.join();
    *served_after = answered - released;
    return answer;
  }

  std::string dir_;
  std::string coordinator_address_;
  int metrics_port_ = -1;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<Subprocess> daemon_;
  std::vector<int> flood_;
};

TEST_F(DescriptorShortageTest, CoordinatorServesAgainOnceDescriptorsAreFree) {
  const int port = PortOf(coordinator_address_);
  ASSERT_GT(port, 0) << coordinator_address_;
  FillDescriptorTable(coordinator_->pid(), [&] { return ConnectTcp(port); });
  absl::Duration served_after;
  const absl::StatusOr<int> answer =
      ReachAcrossTheShortage(coordinator_address_, port, &served_after);
  EXPECT_EQ(answer.value_or(-1), 1) << answer.status();  // SERVING.
  std::printf("coordinator served the queued call %s after the release\n",
              absl::FormatDuration(served_after).c_str());
  // And it goes on serving new connections.
  EXPECT_EQ(Reach(coordinator_address_, absl::Seconds(10)).value_or(-1), 1);
  // The operator sees it: one shortage, over now.
  absl::StatusOr<std::map<std::string, double>> metrics;
  EXPECT_TRUE(Eventually(
      [&] {
        metrics = Scrape();
        return metrics.ok() && metrics->count("shardd_accept_shortages_open") &&
               metrics->at("shardd_accept_shortages_open") == 0;
      },
      absl::Seconds(10)))
      << metrics.status();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GE(metrics->at("shardd_accept_shortages_total"), 1);
  EXPECT_GE(metrics->at("shardd_accept_deferred_total"), 1);
}

// civetweb polls its listener and accepts when it is readable; out of
// descriptors, accept fails and the scrape's connection stays queued, so
// the poll returned at once and civetweb spun a core for as long as the
// shortage lasted. The endpoint's listener is paced (rpc::AcceptPacer):
// it retries a few times a second, and answers the scrape once descriptors
// are free.
TEST_F(DescriptorShortageTest, MetricsEndpointWaitsOutTheShortageIdle) {
  const int port = PortOf(coordinator_address_);
  ASSERT_GT(port, 0) << coordinator_address_;
  FillDescriptorTable(coordinator_->pid(), [&] { return ConnectTcp(port); });
  const int queued_before = ListenQueue(metrics_port_);
  ASSERT_GE(queued_before, 0) << "nothing listens on " << metrics_port_;
  absl::StatusOr<std::string> body = absl::UnknownError("not called");
  std::thread scrape([&] {
    body = metrics::HttpGet("127.0.0.1", metrics_port_, "/metrics",
                            In(absl::Seconds(30)));
  });
  ASSERT_TRUE(
      Eventually([&] { return ListenQueue(metrics_port_) > queued_before; },
                 absl::Seconds(20)))
      << "the scrape's connection never queued";
  // The shortage lasts two seconds with the scrape waiting.
  constexpr absl::Duration kShortage = absl::Seconds(2);
  const absl::Duration cpu_before = CpuTime(coordinator_->pid());
  absl::SleepFor(kShortage);
  const absl::Duration cpu_used = CpuTime(coordinator_->pid()) - cpu_before;
  Release();
  scrape.join();
  std::printf(
      "the coordinator used %s of CPU in %s short of descriptors "
      "with a scrape waiting\n",
      absl::FormatDuration(cpu_used).c_str(),
      absl::FormatDuration(kShortage).c_str());
  // Spinning, it used about as much CPU as time passed (or what the
  // machine could spare); paced, a few milliseconds.
  EXPECT_LT(cpu_used, absl::Milliseconds(500));
  ASSERT_TRUE(body.ok()) << body.status();
  absl::StatusOr<std::map<std::string, double>> samples =
      metrics::ParseExposition(*body);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_TRUE(samples->count("shardd_accept_paced_total"));
  // At most one retry per pause (100 ms) while the scrape waited, with
  // room for the time it took to queue and to be answered.
  const double paced = samples->at("shardd_accept_paced_total");
  EXPECT_GE(paced, 1);
  EXPECT_LE(paced, 60);
}

TEST_F(DescriptorShortageTest, DaemonServesTrainersAndPeersAgainAfterwards) {
  auto d = Subprocess::Spawn(
      {g_shardd_binary, absl::StrCat("--coordinator=", coordinator_address_),
       "--identity=node-0", "--rank=0", absl::StrCat("--shm_dir=", dir_),
       absl::StrCat("--listen_unix=", socket_path()),
       "--peer_listen=127.0.0.1:0"},
      "shardd");
  ASSERT_TRUE(d.ok()) << d.status();
  daemon_ = std::move(*d);
  // "shardd rank 0 listening on unix:PATH peer 127.0.0.1:PORT".
  auto line =
      daemon_->WaitForLine("shardd rank 0 listening on", In(absl::Seconds(30)));
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string peer = line->substr(line->find(" peer ") + 6);
  const int peer_port = PortOf(peer);
  ASSERT_GT(peer_port, 0) << *line;

  // Trainers' connections fill the table.
  FillDescriptorTable(daemon_->pid(),
                      [&] { return ConnectUnix(socket_path()); });
  // A peer's call queues on the peer port meanwhile, and is served once the
  // trainers' connections are gone.
  absl::Duration served_after;
  const absl::StatusOr<int> answer = ReachAcrossTheShortage(
      absl::StrCat("127.0.0.1:", peer_port), peer_port, &served_after);
  EXPECT_EQ(answer.value_or(-1), 1) << answer.status();
  std::printf("shardd served the queued peer call %s after the release\n",
              absl::FormatDuration(served_after).c_str());
  // The Trainer socket, whose listener met the shortage first, accepts
  // again (no health service there: UNIMPLEMENTED is the server's answer).
  const absl::StatusOr<int> trainer =
      Reach(absl::StrCat("unix:", socket_path()), absl::Seconds(10));
  EXPECT_TRUE(Reached(trainer)) << trainer.status();
  EXPECT_EQ(Reach(absl::StrCat("127.0.0.1:", peer_port), absl::Seconds(10))
                .value_or(-1),
            1);
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
