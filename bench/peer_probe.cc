// bench/peer_probe: what a daemon's peer-reachability round costs, the way
// shardd probes now (PeerProbePool: asynchronous calls over channels kept
// between rounds) against the way it probed before (a thread per peer, each
// probe on a fresh channel: PeerClient::Probe), in the same run.
//
// N Peer servers (a Probe that answers at once) listen on 127.0.0.1 in this
// process; each way runs R rounds back to back (no interval), every round
// probing all N. Per way: wall time per round, CPU time per probe (this
// process, all threads: the prober's and the servers' side of each probe,
// since every daemon is both), and new TCP connections per probe (client
// addresses the servers had not seen before, over the probes; the pool's
// connect in its warm-up round is not counted). N = 38 is a daemon's
// share at W = 256, F = 8 (F + W/F - 2); --quick: N = 8, fewer rounds.
//
// Figures: probe_cpu_us_pool, probe_cpu_us_fresh_channel,
// probe_cpu_ratio_fresh_to_pool, connections_per_probe_pool,
// connections_per_probe_fresh_channel.
//
// Run from the repository root: scripts/bench peer_probe [--quick].
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/peer_client.h"
#include "daemon/node/peer_probe_pool.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

namespace shardd::bench {
namespace {

struct Options {
  bool quick = false;
  std::string out;
};

// A Peer server that answers Probe at once and records who called.
class ProbeServer final : public v1::Peer::Service {
 public:
  ProbeServer() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~ProbeServer() override {
    server_->Shutdown(std::chrono::system_clock::now());
  }

  grpc::Status Probe(grpc::ServerContext* context, const v1::ProbeRequest*,
                     v1::ProbeResponse* response) override {
    response->set_rank(0);
    absl::MutexLock lock(&mu_);
    if (callers_.insert(context->peer()).second) ++new_callers_;
    return grpc::Status::OK;
  }

  // Client addresses (TCP connections) not seen before, since the last
  // call.
  int TakeConnections() {
    absl::MutexLock lock(&mu_);
    const int n = new_callers_;
    new_callers_ = 0;
    return n;
  }
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Mutex mu_;
  std::set<std::string> callers_ ABSL_GUARDED_BY(mu_);
  int new_callers_ ABSL_GUARDED_BY(mu_) = 0;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

struct WayResult {
  double wall_s_per_round = 0;
  double cpu_us_per_probe = 0;
  double connections_per_probe = 0;
  int failures = 0;
};

// Runs `rounds` rounds of `round` (which returns its failed probes) after
// one warm-up round, counting what the servers saw.
template <typename Round>
WayResult Measure(std::vector<std::unique_ptr<ProbeServer>>& servers,
                  int rounds, Round&& round) {
  round();  // Warm-up: the pool's first round connects.
  for (auto& s : servers) s->TakeConnections();
  WayResult r;
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) r.failures += round();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  const double cpu = CpuSeconds() - cpu0;
  int connections = 0;
  for (auto& s : servers) connections += s->TakeConnections();
  const double probes = static_cast<double>(rounds) * servers.size();
  r.wall_s_per_round = wall / rounds;
  r.cpu_us_per_probe = cpu / probes * 1e6;
  r.connections_per_probe = connections / probes;
  return r;
}

int Run(const Options& o) {
  const int n = o.quick ? 8 : 38;
  const int rounds = o.quick ? 20 : 60;
  std::vector<std::unique_ptr<ProbeServer>> servers;
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    servers.push_back(std::make_unique<ProbeServer>());
    addresses.push_back(servers.back()->address());
  }
  const absl::Duration timeout = absl::Seconds(10);

  node::PeerProbePool pool;
  const WayResult kept = Measure(servers, rounds, [&] {
    int failed = 0;
    for (const absl::Status& s :
         pool.ProbeAll(addresses, MonoNow() + timeout)) {
      failed += s.ok() ? 0 : 1;
    }
    return failed;
  });
  // The way before: a thread per peer, a fresh channel per probe.
  const WayResult fresh = Measure(servers, rounds, [&] {
    std::vector<absl::Status> results(addresses.size());
    std::vector<std::thread> threads;
    const MonoTime deadline = MonoNow() + timeout;
    for (size_t i = 0; i < addresses.size(); ++i) {
      threads.emplace_back([&, i] {
        results[i] =
            node::PeerClient::Probe(nullptr, addresses[i], deadline).status();
      });
    }
    for (std::thread& t : threads) t.join();
    int failed = 0;
    for (const absl::Status& s : results) failed += s.ok() ? 0 : 1;
    return failed;
  });

  BenchReport report("peer_probe");
  for (const auto& [name, r] :
       {std::pair<std::string, WayResult>{"kept channels, async (now)", kept},
        {"fresh channel + thread per probe (before)", fresh}}) {
    report.AddRow({{"way", name},
                   {"peers", static_cast<double>(n)},
                   {"rounds", static_cast<double>(rounds)},
                   {"ms_per_round", r.wall_s_per_round * 1e3},
                   {"cpu_us_per_probe", r.cpu_us_per_probe},
                   {"connections_per_probe", r.connections_per_probe},
                   {"failed_probes", static_cast<double>(r.failures)}});
  }
  report.SetFigure("probe_cpu_us_pool", kept.cpu_us_per_probe);
  report.SetFigure("probe_cpu_us_fresh_channel", fresh.cpu_us_per_probe);
  report.SetFigure("probe_cpu_ratio_fresh_to_pool",
                   fresh.cpu_us_per_probe / kept.cpu_us_per_probe);
  report.SetFigure("connections_per_probe_pool", kept.connections_per_probe);
  report.SetFigure("connections_per_probe_fresh_channel",
                   fresh.connections_per_probe);
  if (int rc = report.Publish(o.out, std::cout, std::cerr); rc != 0) {
    return rc;
  }
  if (kept.failures + fresh.failures > 0) {
    std::cerr << "peer_probe: " << kept.failures + fresh.failures
              << " probes failed\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  shardd::bench::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      options.quick = true;
    } else if (absl::StartsWith(arg, "--out=")) {
      options.out = arg.substr(6);
    } else {
      std::cerr << "usage: " << argv[0] << " [--quick] [--out=PATH]\n";
      return 2;
    }
  }
  return shardd::bench::Run(options);
}
