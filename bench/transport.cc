// bench/transport: the shared-memory communicator (ShmCollective, what
// --collective_transport=auto picks for a group on one host) against
// GlooCollective over TCP, and both against memcpy of the same bytes, in
// the same W processes on this machine.
//
// The parent spawns W copies of this binary (--worker) for W = 2 and 4.
// Every worker forms both communicators through one FileStore directory
// (CreateGlooCollective, and CreateHostCollective with the shm transport
// required), allocates its buffers once at the largest size and writes
// them (first touch is very slow on these VMs), then for each operation
// (fp32, sum: all-gather, reduce-scatter, all-reduce) and size (1, 4, 16,
// 64 MiB; --quick 1 and 16 MiB) times: Gloo, shm, and a memcpy of the
// operation's size made by every worker at once (the copy any transport
// has to beat, under the same contention for the two cores). Size = the
// whole buffer (all-gather output, reduce-scatter input, all-reduce
// buffer); bus bandwidth by the nccl-tests convention (algbw × (W-1)/W for
// all-gather and reduce-scatter, × 2(W-1)/W for all-reduce); memcpy's is
// size / time.
//
// Timing: every repetition starts after a barrier and ends with one (shm's,
// tens of microseconds), so rank 0's time is the slowest rank's; the three
// contenders alternate within a repetition; the table shows medians over
// the repetitions (7; --quick 3) after one warm-up. Figures: per W and
// operation at the largest size, shm/gloo and shm/memcpy bus-bandwidth
// ratios, and the smallest shm/gloo ratio over every point.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/file_store.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/comm/host_collective.h"
#include "daemon/comm/host_transport.h"
#include "daemon/core/dtype.h"
#include "tests/collectives/process_group.h"

namespace shardd::bench {
namespace {

using comm::Collective;
using comm::ReduceOp;
using core::DType;

constexpr int64_t kMiB = 1024 * 1024;

struct Options {
  bool quick = false;
  bool worker = false;
  std::string out;
  std::string store;
  int rank = -1;
  int size = 0;
  int64_t slot_kib = 1024;  // ShmCollective's slot (its default: 1 MiB).
};

[[noreturn]] void Die(absl::string_view what) {
  std::cerr << "bench/transport: " << what << std::endl;
  std::exit(1);
}

void Check(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

std::vector<int64_t> Sizes(bool quick) {
  if (quick) return {kMiB, 16 * kMiB};
  return {kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB};
}

const std::vector<std::string>& Ops() {
  static const std::vector<std::string> ops = {"allgather", "reducescatter",
                                               "allreduce"};
  return ops;
}

double BusFactor(const std::string& op, int world) {
  const double w = world;
  return op == "allreduce" ? 2 * (w - 1) / w : (w - 1) / w;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One rank: forms both communicators, times every point, and (rank 0)
// prints "POINT op=.. bytes=.. gloo_s=.. shm_s=.. memcpy_s=..".
void RunWorker(const Options& o) {
  comm::FileStore store(o.store);
  comm::GlooCollectiveOptions g;
  g.rank = o.rank;
  g.size = o.size;
  g.epoch = 1;
  g.group = "gloo";
  g.connect_timeout = absl::Seconds(60);
  g.default_op_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Collective>> gloo =
      comm::CreateGlooCollective(g, store);
  Check(gloo.status(), "CreateGlooCollective");
  comm::HostCollectiveOptions h;
  h.gloo = g;
  h.gloo.group = "shm";
  h.transport = comm::TransportMode::kShm;
  h.slot_bytes = o.slot_kib * 1024;
  absl::StatusOr<std::unique_ptr<Collective>> shm =
      comm::CreateHostCollective(h, store);
  Check(shm.status(), "CreateHostCollective(shm)");

  const std::vector<int64_t> sizes = Sizes(o.quick);
  const int64_t max_bytes = sizes.back();
  std::vector<float> a(max_bytes / 4), b(max_bytes / 4);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i + o.rank) % 13);
    b[i] = 1.0f;
  }
  const int reps = o.quick ? 3 : 7;
  auto barrier = [&] { Check((*shm)->Barrier()->Wait(), "barrier"); };
  for (const std::string& op : Ops()) {
    for (int64_t bytes : sizes) {
      const int64_t n = bytes / 4;
      const int64_t shard = n / o.size;
      const std::vector<int64_t> counts(o.size, shard);
      auto run = [&](Collective& c) {
        absl::Status s;
        if (op == "allgather") {
          s = c.AllGather(a.data() + o.rank * shard, b.data(), counts,
                          DType::kFloat32)
                  ->Wait();
        } else if (op == "reducescatter") {
          s = c.ReduceScatter(a.data(), b.data(), counts, DType::kFloat32,
                              ReduceOp::kSum)
                  ->Wait();
        } else {
          s = c.AllReduce(b.data(), shard * o.size, DType::kFloat32,
                          ReduceOp::kSum)
                  ->Wait();
        }
        Check(s, op);
      };
      auto timed = [&](const std::function<void()>& fn) {
        barrier();
        const absl::Time start = absl::Now();
        fn();
        barrier();
        return absl::ToDoubleSeconds(absl::Now() - start);
      };
      auto copy = [&] { std::memcpy(b.data(), a.data(), n * 4); };
      std::vector<double> gloo_s, shm_s, memcpy_s;
      for (int rep = -1; rep < reps; ++rep) {
        const double tg = timed([&] { run(**gloo); });
        const double ts = timed([&] { run(**shm); });
        const double tm = timed(copy);
        if (rep < 0) continue;  // Warm-up.
        gloo_s.push_back(tg);
        shm_s.push_back(ts);
        memcpy_s.push_back(tm);
      }
      if (o.rank == 0) {
        std::cout << "POINT op=" << op << " bytes=" << bytes
                  << " gloo_s=" << Median(gloo_s) << " shm_s=" << Median(shm_s)
                  << " memcpy_s=" << Median(memcpy_s) << std::endl;
      }
    }
  }
  barrier();
}

// Every "POINT k=v ..." line of `text`.
std::vector<std::map<std::string, std::string>> Points(
    const std::string& text) {
  std::vector<std::map<std::string, std::string>> points;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "POINT ")) continue;
    std::map<std::string, std::string> kv;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      std::vector<std::string> p =
          absl::StrSplit(field, absl::MaxSplits('=', 1));
      if (p.size() == 2) kv[p[0]] = p[1];
    }
    points.push_back(std::move(kv));
  }
  return points;
}

int RunParent(const Options& o) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) Die("readlink /proc/self/exe");
  self[len] = '\0';
  BenchReport report("transport");
  double worst = 1e300;
  for (int world : {2, 4}) {
    char pattern[] = "/tmp/bench_transport.XXXXXX";
    if (mkdtemp(pattern) == nullptr) Die("mkdtemp");
    const std::string dir = pattern;
    testing::ProcessGroup group;
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> argv = {
          self, "--worker", absl::StrCat("--rank=", r),
          absl::StrCat("--size=", world), absl::StrCat("--store=", dir)};
      if (o.quick) argv.push_back("--quick");
      argv.push_back(absl::StrCat("--slot_kib=", o.slot_kib));
      absl::StatusOr<pid_t> pid =
          group.Spawn(argv, absl::StrCat(dir, "/rank", r, ".out"),
                      absl::StrCat(dir, "/rank", r, ".err"));
      Check(pid.status(), "spawn");
      pids.push_back(*pid);
    }
    const absl::Status waited = group.WaitForExit(
        pids, absl::Now() + absl::Minutes(10), /*stop_on_failure=*/true);
    if (!waited.ok()) {
      Die(absl::StrCat("W=", world, ": ", waited.ToString(), "\n",
                       testing::ReadFileOrEmpty(dir + "/rank0.err")));
    }
    for (const auto& p : Points(testing::ReadFileOrEmpty(dir + "/rank0.out"))) {
      const std::string op = p.at("op");
      double bytes = 0, gloo_s = 0, shm_s = 0, memcpy_s = 0;
      if (!absl::SimpleAtod(p.at("bytes"), &bytes) ||
          !absl::SimpleAtod(p.at("gloo_s"), &gloo_s) ||
          !absl::SimpleAtod(p.at("shm_s"), &shm_s) ||
          !absl::SimpleAtod(p.at("memcpy_s"), &memcpy_s)) {
        Die("unparsable POINT line");
      }
      const double factor = BusFactor(op, world);
      const double gloo_bus = bytes / gloo_s * factor / 1e9;
      const double shm_bus = bytes / shm_s * factor / 1e9;
      const double memcpy_bw = bytes / memcpy_s / 1e9;
      report.AddRow({{"W", static_cast<double>(world)},
                     {"op", op},
                     {"MiB", bytes / kMiB},
                     {"gloo_ms", gloo_s * 1e3},
                     {"shm_ms", shm_s * 1e3},
                     {"memcpy_ms", memcpy_s * 1e3},
                     {"gloo_busbw_GBps", gloo_bus},
                     {"shm_busbw_GBps", shm_bus},
                     {"memcpy_GBps", memcpy_bw},
                     {"shm_over_gloo", shm_bus / gloo_bus},
                     {"shm_over_memcpy", shm_bus / memcpy_bw}});
      worst = std::min(worst, shm_bus / gloo_bus);
      if (bytes == Sizes(o.quick).back()) {
        report.SetFigure(absl::StrCat("w", world, "_", op, "_shm_over_gloo"),
                         shm_bus / gloo_bus);
        report.SetFigure(absl::StrCat("w", world, "_", op, "_shm_over_memcpy"),
                         shm_bus / memcpy_bw);
      }
    }
  }
  report.SetFigure("min_shm_over_gloo", worst);
  std::cout << report.Table();
  if (!o.out.empty()) Check(report.WriteJson(o.out), "writing " + o.out);
  return 0;
}

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0 << " [--quick] [--slot_kib=N] [--out=PATH]"
            << std::endl;
  return 2;
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  shardd::bench::Options o;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--worker") {
      o.worker = true;
    } else if (absl::StartsWith(arg, "--out=")) {
      o.out = std::string(arg.substr(6));
    } else if (absl::StartsWith(arg, "--store=")) {
      o.store = std::string(arg.substr(8));
    } else if (absl::StartsWith(arg, "--rank=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &o.rank)) {
        return shardd::bench::Usage(argv[0]);
      }
    } else if (absl::StartsWith(arg, "--slot_kib=")) {
      if (!absl::SimpleAtoi(arg.substr(11), &o.slot_kib)) {
        return shardd::bench::Usage(argv[0]);
      }
    } else if (absl::StartsWith(arg, "--size=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &o.size)) {
        return shardd::bench::Usage(argv[0]);
      }
    } else {
      return shardd::bench::Usage(argv[0]);
    }
  }
  if (o.worker) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // Never outlive the parent.
    if (o.rank < 0 || o.rank >= o.size || o.store.empty()) {
      return shardd::bench::Usage(argv[0]);
    }
    shardd::bench::RunWorker(o);
    return 0;
  }
  return shardd::bench::RunParent(o);
}
