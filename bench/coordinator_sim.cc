// bench/coordinator_sim: the coordinator's own cost at thousands of ranks.
//
// A real coordinator process (bazel-bin/daemon/coordinator/coordinator) and
// W simulated members (bench/simulated_members.h: asynchronous gRPC state
// machines, a few threads for all of them) on 127.0.0.1, speaking the real
// shardd.v1 protocol. The coordinator's CPU time is read from /proc, the
// harness's from getrusage, separately. For each W (256, 1,024, 4,096;
// --quick: 256, 1,024), with F = 8 and the default lease (1.5 s) and
// heartbeat interval (0.5 s):
//
//  - join_to_ready: W members join at once; seconds until a member sees the
//    epoch ready (each reports READY as soon as it sees the epoch's plan).
//  - steady heartbeats: the ready job left alone; coordinator CPU seconds
//    per heartbeat (its keepalives to every watcher included).
//  - failure_to_ready: a member crashes, a hot spare joins its slot once
//    the coordinator has removed it; seconds from the crash until a member
//    sees the new epoch ready (detection included, shard copy excluded),
//    and the watch bytes each member received per membership change.
//  - heartbeat capacity: 4 load threads x 32 heartbeats in flight on top
//    of the members; heartbeats per second the coordinator sustained.
//
// A W that does not form within its timeout is reported with how far it
// got (members joined, epoch) and the run goes on.
//
//   coordinator_sim [--quick] [--out=PATH] [--worlds=256,1024]
//                   [--coordinator=PATH] [--perf_dir=DIR] [--full_watch]
//
// --full_watch: the members ask for full watch updates and Join replies
// with every member, as daemons that predate scoped streams do.
//
// --perf_dir: `perf record -a --call-graph dwarf` of the whole machine
// during each W's join_to_ready and failure_to_ready, into
// DIR/coordinator_w<W>.perf.data; `perf report --pid=PID` (the coordinator's
// pid is printed) picks the coordinator out.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "bench/coordinator_scenarios.h"
#include "daemon/core/mono_time.h"
#include "daemon/testing/subprocess.h"

namespace shardd::bench {
namespace {

struct Options {
  bool quick = false;
  std::string out;
  std::vector<int> worlds;
  std::string coordinator = "bazel-bin/daemon/coordinator/coordinator";
  std::string perf_dir;
  // --full_watch: members watch full updates and Join with the member list
  // (daemons that predate scoped streams), for comparison.
  bool full_watch = false;
};

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--quick] [--out=PATH] [--worlds=W,W,...] "
               "[--coordinator=PATH] [--perf_dir=DIR] [--full_watch]\n";
  return 2;
}

double Or(bool ok, double value) { return ok ? value : std::nan(""); }

// `perf record -a` (every process of the machine) until Finish.
class PerfRecording {
 public:
  static std::unique_ptr<PerfRecording> Start(const std::string& path) {
    // System-wide: `perf record -p` follows only some of the threads the
    // gRPC server starts later; `perf report --pid` picks the coordinator.
    // DWARF call graphs: the build has no frame pointers (-O2).
    auto p = tests::Subprocess::Spawn(
        {"/usr/bin/perf", "record", "-a", "-F", "199", "--call-graph",
         "dwarf,4096", "-q", "-o", path},
        "perf");
    if (!p.ok()) {
      std::cerr << "bench: perf: " << p.status() << "\n";
      return nullptr;
    }
    auto r = std::make_unique<PerfRecording>();
    r->process_ = *std::move(p);
    return r;
  }
  void Finish() {
    process_->Signal(SIGINT);
    (void)process_->Wait(absl::Now() + absl::Seconds(60));
  }

 private:
  std::unique_ptr<tests::Subprocess> process_;
};

void Log(const std::string& line) {
  std::fprintf(stderr, "bench: %s\n", line.c_str());
}

// Every scenario for one W; adds rows and figures to `report`. Returns
// whether the job formed.
bool RunWorld(const Options& options, int w, BenchReport& report) {
  SimConfig config;
  config.coordinator_binary = options.coordinator;
  config.world_size = w;
  config.sharding_factor = std::min(8, w / 2);
  config.scoped_watch = !options.full_watch;
  config.coordinator_log = absl::StrCat("/tmp/coordinator_sim_w", w, ".log");
  std::remove(config.coordinator_log.c_str());
  absl::StatusOr<SimJob> job = StartJob(config);
  if (!job.ok()) {
    Log(absl::StrCat("W=", w, ": ", job.status().ToString()));
    return false;
  }
  std::unique_ptr<PerfRecording> perf;
  if (!options.perf_dir.empty()) {
    Log(absl::StrCat("W=", w, ": coordinator pid ", job->coordinator->pid()));
    perf = PerfRecording::Start(
        absl::StrCat(options.perf_dir, "/coordinator_w", w, ".perf.data"));
  }
  const absl::Duration join_timeout =
      options.quick ? absl::Seconds(45) : absl::Seconds(240);
  const FormResult form = JoinToReady(*job, join_timeout);
  const std::string suffix = absl::StrCat("_w", w);
  Log(absl::StrCat(
      "W=", w, " join_to_ready: ", form.formed ? "formed" : "NOT formed",
      " in ", form.seconds, " s (all members saw it: ", form.all_seen_seconds,
      " s), epoch ", form.epoch, ", ", form.joined, " joined, ",
      form.members_listed, " listed, ", form.rejoins,
      " leases expired (slowest heartbeat reply ", form.heartbeat_max_seconds,
      " s); coordinator CPU ", form.cpu.coordinator_s, " s, harness ",
      form.cpu.harness_s, " s; threads ", job->coordinator->Threads(), ", RSS ",
      job->coordinator->ResidentBytes() >> 20, " MiB"));
  report.AddRow(
      {{"scenario", std::string("join_to_ready")},
       {"world_size", static_cast<double>(w)},
       {"formed", form.formed ? 1.0 : 0.0},
       {"seconds", Or(form.formed, form.seconds)},
       {"all_seen_s", form.all_seen_seconds},
       {"epoch", static_cast<double>(form.epoch)},
       {"joined", static_cast<double>(form.joined)},
       {"listed", static_cast<double>(form.members_listed)},
       {"rejoins", static_cast<double>(form.rejoins)},
       {"slowest_hb_s", form.heartbeat_max_seconds},
       {"coord_cpu_s", form.cpu.coordinator_s},
       {"harness_cpu_s", form.cpu.harness_s},
       {"change_MiB", static_cast<double>(form.change_bytes) / (1 << 20)},
       {"coord_threads", static_cast<double>(job->coordinator->Threads())},
       {"coord_rss_MiB",
        static_cast<double>(job->coordinator->ResidentBytes()) / (1 << 20)}});
  report.SetFigure("join_to_ready_seconds" + suffix,
                   Or(form.formed, form.seconds));
  if (!form.formed) {
    if (perf != nullptr) perf->Finish();
    return false;
  }

  const SteadyResult steady = SteadyHeartbeats(
      *job, options.quick ? absl::Seconds(3) : absl::Seconds(6));
  Log(absl::StrCat("W=", w, " steady: ", steady.heartbeats, " heartbeats in ",
                   steady.seconds, " s, coordinator CPU ",
                   steady.cpu.coordinator_s, " s (", steady.coordinator_cores,
                   " cores), harness ", steady.cpu.harness_s, " s, keepalive ",
                   steady.keepalive_bytes >> 10, " KiB"));
  report.AddRow(
      {{"scenario", std::string("steady_heartbeats")},
       {"world_size", static_cast<double>(w)},
       {"seconds", steady.seconds},
       {"heartbeats", static_cast<double>(steady.heartbeats)},
       {"coord_cpu_s", steady.cpu.coordinator_s},
       {"harness_cpu_s", steady.cpu.harness_s},
       {"coord_cores", steady.coordinator_cores},
       {"cpu_per_hb_us", steady.coordinator_cpu_per_heartbeat * 1e6},
       {"keepalive_MiB_per_s", static_cast<double>(steady.keepalive_bytes) /
                                   (1 << 20) / steady.seconds}});
  report.SetFigure("coordinator_cpu_seconds_per_heartbeat" + suffix,
                   steady.coordinator_cpu_per_heartbeat);

  const FailureResult failure =
      FailureToReady(*job, w / 2 + 1, absl::Seconds(options.quick ? 60 : 120));
  if (perf != nullptr) perf->Finish();
  Log(absl::StrCat(
      "W=", w,
      " failure_to_ready: ", failure.recovered ? "recovered" : "NOT recovered",
      " in ", failure.seconds, " s (detected ", failure.detection_seconds,
      " s, joined ", failure.joined_seconds, " s, all saw it ",
      failure.all_seen_seconds, " s), ", failure.epochs, " epochs, ",
      failure.bytes_per_member_per_change, " B/member/change, coordinator CPU ",
      failure.cpu.coordinator_s, " s, harness ", failure.cpu.harness_s, " s"));
  report.AddRow(
      {{"scenario", std::string("failure_to_ready")},
       {"world_size", static_cast<double>(w)},
       {"formed", failure.recovered ? 1.0 : 0.0},
       {"seconds", Or(failure.recovered, failure.seconds)},
       {"detection_s", failure.detection_seconds},
       {"joined_s", failure.joined_seconds},
       {"all_seen_s", failure.all_seen_seconds},
       {"epoch", static_cast<double>(failure.epoch)},
       {"epochs", static_cast<double>(failure.epochs)},
       {"rejoins", static_cast<double>(failure.rejoins)},
       {"coord_cpu_s", failure.cpu.coordinator_s},
       {"harness_cpu_s", failure.cpu.harness_s},
       {"change_MiB", static_cast<double>(failure.change_bytes) / (1 << 20)},
       {"updates_per_member_per_change", failure.updates_per_member_per_change},
       {"bytes_per_member_per_change", failure.bytes_per_member_per_change}});
  report.SetFigure("failure_to_ready_seconds" + suffix,
                   Or(failure.recovered, failure.seconds));
  report.SetFigure("watch_bytes_per_member_per_change" + suffix,
                   Or(failure.epochs > 0, failure.bytes_per_member_per_change));

  const CapacityResult capacity = HeartbeatCapacity(
      *job, 4, 32, options.quick ? absl::Seconds(2) : absl::Seconds(4));
  Log(absl::StrCat("W=", w, " capacity: ", capacity.per_second,
                   " heartbeats/s (", capacity.load_failed,
                   " failed), coordinator ", capacity.coordinator_cores,
                   " cores, ", capacity.coordinator_cpu_per_heartbeat * 1e6,
                   " us CPU per heartbeat, harness CPU ",
                   capacity.cpu.harness_s, " s"));
  report.AddRow(
      {{"scenario", std::string("heartbeat_capacity")},
       {"world_size", static_cast<double>(w)},
       {"seconds", capacity.seconds},
       {"heartbeats",
        static_cast<double>(capacity.load_ok + capacity.member_heartbeats)},
       {"failed", static_cast<double>(capacity.load_failed)},
       {"per_second", capacity.per_second},
       {"coord_cpu_s", capacity.cpu.coordinator_s},
       {"harness_cpu_s", capacity.cpu.harness_s},
       {"coord_cores", capacity.coordinator_cores},
       {"cpu_per_hb_us", capacity.coordinator_cpu_per_heartbeat * 1e6}});
  // The largest W that formed sets the figure (the loop goes up in W).
  report.SetFigure("heartbeat_capacity_per_second", capacity.per_second);
  report.SetFigure("heartbeat_capacity_world_size", w);
  // What one core of the coordinator would sustain: robust to a machine
  // whose other processes take most of its cores.
  report.SetFigure("heartbeat_capacity_per_coordinator_core",
                   capacity.coordinator_cpu_per_heartbeat > 0
                       ? 1.0 / capacity.coordinator_cpu_per_heartbeat
                       : std::nan(""));

  const int64_t left = job->members->LeaveAll(MonoNow() + absl::Seconds(20));
  Log(absl::StrCat("W=", w, ": ", left, " members left"));
  job->members->Stop();
  (void)job->coordinator->Stop();
  return true;
}

int Run(const Options& options) {
  BenchReport report("coordinator_sim");
  std::vector<int> worlds = options.worlds;
  if (worlds.empty()) {
    worlds = options.quick ? std::vector<int>{256, 1024}
                           : std::vector<int>{256, 1024, 4096};
  }
  for (int w : worlds) RunWorld(options, w, report);
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
    } else if (absl::StartsWith(arg, "--coordinator=")) {
      options.coordinator = arg.substr(14);
    } else if (arg == "--full_watch") {
      options.full_watch = true;
    } else if (absl::StartsWith(arg, "--perf_dir=")) {
      options.perf_dir = arg.substr(11);
    } else if (absl::StartsWith(arg, "--worlds=")) {
      for (absl::string_view w : absl::StrSplit(arg.substr(9), ',')) {
        int value = 0;
        if (!absl::SimpleAtoi(w, &value) || value < 2) {
          return shardd::bench::Usage(argv[0]);
        }
        options.worlds.push_back(value);
      }
    } else {
      return shardd::bench::Usage(argv[0]);
    }
  }
  return shardd::bench::Run(options);
}
