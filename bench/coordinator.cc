// bench/coordinator: how fast the coordinator forms a job, how many
// heartbeats it handles, and how quickly it declares a silent member dead.
//
// Everything runs in one process over real gRPC on 127.0.0.1: an
// InProcessCoordinator (manager + service + lease timer) and simulated
// members, each a MemberClient (the daemon side of the protocol: join,
// heartbeat thread, watch stream) exactly as a daemon uses it.
//
//  - join_to_ready: W members join at once; each waits until its watch shows
//    all W slots live, reports READY for that epoch; time from the first
//    Join to the coordinator's epoch being ready. W = 4, 16, 64, 256.
//  - heartbeat rate: with W = 256 members joined, 8 client threads send
//    Heartbeat RPCs back to back (valid leases, READY) for a few seconds;
//    successful heartbeats per second.
//  - detection: W = 16 members heartbeating (lease 1.5 s, heartbeat 0.5 s);
//    repeatedly one member stops at a random phase of its heartbeat period
//    (its client is destroyed without Leave, as in a crash) and the time
//    until another member's watch shows it gone is measured. Then a
//    replacement joins the slot. Expected: lease minus the time since the
//    last heartbeat, i.e. between lease - interval and lease.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/coordinator/member_client.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::bench {
namespace {

namespace pb = ::shardd::v1;
using coordinator::InProcessCoordinator;
using coordinator::InProcessCoordinatorOptions;
using coordinator::MemberClient;
using coordinator::MemberClientOptions;
using coordinator::MembershipView;

constexpr absl::Duration kLease = absl::Milliseconds(1500);
constexpr absl::Duration kHeartbeat = absl::Milliseconds(500);

struct Options {
  bool quick = false;
  std::string out;
};

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0 << " [--quick] [--out=PATH]\n";
  return 2;
}

absl::StatusOr<std::unique_ptr<InProcessCoordinator>> StartCoordinator(
    int world_size) {
  InProcessCoordinatorOptions o;
  o.coordinator.membership.world_size = world_size;
  o.coordinator.membership.sharding_factor = world_size >= 2 ? 2 : 1;
  o.coordinator.membership.detector.lease = kLease;
  o.heartbeat_interval = kHeartbeat;
  return InProcessCoordinator::Start(o);
}

// A few connections shared by the simulated members (a distinct channel
// argument keeps gRPC from folding them into one).
std::vector<std::shared_ptr<grpc::Channel>> Channels(const std::string& address,
                                                     int n) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("shardd.bench.channel", i);
    channels.push_back(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args));
  }
  return channels;
}

MemberClientOptions MemberOptions(std::shared_ptr<grpc::Channel> channel,
                                  int rank, const std::string& identity) {
  MemberClientOptions o;
  o.channel = std::move(channel);
  o.rank = rank;
  o.identity = identity;
  o.peer_address = absl::StrCat("127.0.0.1:", 20000 + rank);
  o.rpc_timeout = absl::Seconds(10);
  return o;
}

// Waits (in-process, event-driven) until the coordinator is ready.
bool AwaitReady(InProcessCoordinator& c, MonoTime deadline) {
  coordinator::ClusterSnapshot s = c.manager().Snapshot(0);
  while (!s.ready && MonoNow() < deadline) {
    s = c.manager().AwaitChange(s.version, deadline);
  }
  return s.ready;
}

struct Job {
  std::unique_ptr<InProcessCoordinator> coordinator;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<MemberClient>> members;
  double join_to_ready_seconds = -1;
};

// W members join concurrently and report READY for the first epoch in which
// they see all W live.
absl::StatusOr<Job> FormJob(int world_size) {
  Job job;
  auto c = StartCoordinator(world_size);
  if (!c.ok()) return c.status();
  job.coordinator = *std::move(c);
  job.channels = Channels(job.coordinator->address(), 8);
  job.members.resize(world_size);
  std::vector<absl::Status> errors(world_size);
  const MonoTime start = MonoNow();
  const MonoTime deadline = start + absl::Seconds(120);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      auto m = MemberClient::Join(MemberOptions(
          job.channels[r % job.channels.size()], r, absl::StrCat("sim-", r)));
      if (!m.ok()) {
        errors[r] = m.status();
        return;
      }
      auto v = (*m)->WaitFor(
          [](const MembershipView& v) { return v.AllLive(); }, deadline);
      if (!v.ok()) {
        errors[r] = v.status();
      } else {
        errors[r] = (*m)->SetReady(v->epoch, 0);
      }
      job.members[r] = *std::move(m);
    });
  }
  const bool ready = AwaitReady(*job.coordinator, deadline);
  const MonoTime ready_at = MonoNow();
  for (std::thread& t : threads) t.join();
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  if (!ready) {
    return absl::DeadlineExceededError(
        absl::StrCat("W=", world_size, " not ready within 120 s"));
  }
  job.join_to_ready_seconds = absl::ToDoubleSeconds(ready_at - start);
  return job;
}

// Back-to-back heartbeats from `threads` client threads for `duration`.
double HeartbeatRate(Job& job, int threads, absl::Duration duration) {
  const int64_t epoch = job.coordinator->manager().Snapshot(0).epoch;
  std::atomic<int64_t> ok{0};
  std::atomic<int64_t> failed{0};
  const MonoTime start = MonoNow();
  const MonoTime end = start + duration;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto stub =
          pb::Coordinator::NewStub(job.channels[t % job.channels.size()]);
      for (int i = t; MonoNow() < end; i += threads) {
        const MemberClient& m = *job.members[i % job.members.size()];
        pb::HeartbeatRequest request;
        request.set_rank(m.rank());
        request.set_lease_token(m.join_response().lease_token());
        request.set_epoch(epoch);
        request.set_state(pb::MEMBER_STATE_READY);
        pb::HeartbeatResponse response;
        grpc::ClientContext context;
        rpc::SetDeadline(&context, MonoNow() + absl::Seconds(5));
        if (stub->Heartbeat(&context, request, &response).ok()) {
          ++ok;
        } else {
          ++failed;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  const double seconds = absl::ToDoubleSeconds(MonoNow() - start);
  if (failed.load() > 0) {
    std::fprintf(stderr, "bench: %lld heartbeats failed\n",
                 static_cast<long long>(failed.load()));
  }
  return static_cast<double>(ok.load()) / seconds;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(
      v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Detection latency samples (seconds) over `trials` crashes.
absl::StatusOr<std::vector<double>> Detection(int world_size, int trials) {
  absl::StatusOr<Job> job = FormJob(world_size);
  if (!job.ok()) return job.status();
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int64_t> phase_us(
      0, absl::ToInt64Microseconds(kHeartbeat) - 1);
  std::vector<double> samples;
  for (int trial = 0; trial < trials; ++trial) {
    const int victim = 1 + trial % (world_size - 1);
    MemberClient& observer = *job->members[0];
    // A random point within the victim's heartbeat period.
    absl::SleepFor(absl::Microseconds(phase_us(rng)));
    const MonoTime crashed = MonoNow();
    job->members[victim].reset();  // No Leave: a crash.
    auto gone = observer.WaitFor(
        [victim](const MembershipView& v) {
          for (const pb::MemberInfo& m : v.members) {
            if (m.rank() == victim) return false;
          }
          return true;
        },
        crashed + absl::Seconds(30));
    if (!gone.ok()) return gone.status();
    samples.push_back(absl::ToDoubleSeconds(MonoNow() - crashed));
    // A replacement takes the slot before the next trial.
    auto replacement = MemberClient::Join(
        MemberOptions(job->channels[victim % job->channels.size()], victim,
                      absl::StrCat("sim-", victim, "-r", trial)));
    if (!replacement.ok()) return replacement.status();
    job->members[victim] = *std::move(replacement);
  }
  return samples;
}

int Run(const Options& options) {
  BenchReport report("coordinator");
  const std::vector<int> worlds = {4, 16, 64, 256};
  std::unique_ptr<Job> largest;
  for (int w : worlds) {
    absl::StatusOr<Job> job = FormJob(w);
    if (!job.ok()) {
      std::cerr << "bench: " << job.status() << "\n";
      return 1;
    }
    std::fprintf(stderr, "bench: W=%d ready in %.3f s\n", w,
                 job->join_to_ready_seconds);
    report.AddRow({{"measure", std::string("join_to_ready")},
                   {"world_size", static_cast<double>(w)},
                   {"seconds", job->join_to_ready_seconds}});
    if (w == worlds.back()) {
      report.SetFigure("join_to_ready_seconds_w256",
                       job->join_to_ready_seconds);
      largest = std::make_unique<Job>(*std::move(job));
    }
  }

  const absl::Duration hb_duration =
      options.quick ? absl::Seconds(2) : absl::Seconds(5);
  const double rate = HeartbeatRate(*largest, 8, hb_duration);
  report.AddRow({{"measure", std::string("heartbeat_rate")},
                 {"world_size", 256.0},
                 {"client_threads", 8.0},
                 {"seconds", absl::ToDoubleSeconds(hb_duration)},
                 {"per_second", rate}});
  report.SetFigure("heartbeat_rate_per_second", rate);
  largest.reset();

  const int detection_world = 16;
  const int trials = options.quick ? 8 : 40;
  absl::StatusOr<std::vector<double>> samples =
      Detection(detection_world, trials);
  if (!samples.ok()) {
    std::cerr << "bench: detection: " << samples.status() << "\n";
    return 1;
  }
  const double p50 = Percentile(*samples, 0.50);
  const double p99 = Percentile(*samples, 0.99);
  const double min = *std::min_element(samples->begin(), samples->end());
  const double max = *std::max_element(samples->begin(), samples->end());
  report.AddRow({{"measure", std::string("detection")},
                 {"world_size", static_cast<double>(detection_world)},
                 {"trials", static_cast<double>(samples->size())},
                 {"lease_s", absl::ToDoubleSeconds(kLease)},
                 {"heartbeat_s", absl::ToDoubleSeconds(kHeartbeat)},
                 {"min_s", min},
                 {"p50_s", p50},
                 {"p99_s", p99},
                 {"max_s", max}});
  report.SetFigure("detection_p50_seconds", p50);
  report.SetFigure("detection_p99_seconds", p99);
  report.SetFigure("lease_seconds", absl::ToDoubleSeconds(kLease));

  return report.Publish(options.out, std::cout, std::cerr);
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
      return shardd::bench::Usage(argv[0]);
    }
  }
  return shardd::bench::Run(options);
}
