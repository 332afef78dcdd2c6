// bench/state: moving model state in and out of files, each case beside a
// dd-like baseline of the same bytes on the same disk in the same run.
//
// Cases (--case=NAME runs one; all by default), each adding its rows and
// figures to the report:
//   full_export  Trainer.ExportState FULL with AdamW state: W = F = 2
//                NodeManagers in this process (an in-process coordinator,
//                Gloo over loopback, CPU engines), 16 units of 16 MiB fp32
//                (a 768 MiB file; --quick: 8 units of 8 MiB, 192 MiB),
//                rank 0 streaming the file unit by unit. Beside it a
//                sequential write of the same bytes in 8 MiB pieces
//                (write(2) + fsync, as dd conv=fsync) to the same directory.
//                Repetitions alternate the two (5 each; --quick 3).
//                Figures: export_gbps, disk_write_gbps (medians) and
//                export_to_disk_write_ratio (target >= 0.7: the median of
//                each export's ratio to the write right after it); the row also
//                gives the peak RSS growth of the process during the
//                export (both ranks live in it) in units. The same again
//                at W = 1 (no gathers: the writer's own path), figures
//                with the suffix _w1; its RSS growth comes after the W = 2
//                run's heap, which the allocator keeps, so it reads low.
// A case is a function of the options and the report; add one to Cases().
//
// --dir=DIR (default $TMPDIR or /tmp): where the files go (the disk
// measured); they are removed afterwards.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_report.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/node_manager.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::bench {
namespace {

namespace pb = ::shardd::v1;

constexpr int64_t kMiB = int64_t{1} << 20;

struct Options {
  bool quick = false;
  std::string out;
  std::string dir;
  std::string only_case;
};

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Peak RSS since the last reset, and the reset (/proc/self/clear_refs).
int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmHWM:")) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    int64_t kb = 0;
    return absl::SimpleAtoi(digits, &kb) ? kb * 1024 : -1;
  }
  return -1;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Writes `bytes` sequentially in 8 MiB pieces, fsyncs, removes the file:
// the disk's own sequential write speed (GB/s).
absl::StatusOr<double> DiskWriteGbps(const std::string& dir, int64_t bytes) {
  const std::string path = absl::StrCat(dir, "/dd.bin");
  std::vector<char> piece(8 * kMiB, 'x');
  const auto start = std::chrono::steady_clock::now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t w =
        write(fd, piece.data(), std::min<int64_t>(piece.size(), bytes - done));
    if (w < 0) {
      close(fd);
      unlink(path.c_str());
      return absl::ErrnoToStatus(errno, path);
    }
    done += w;
  }
  fsync(fd);
  close(fd);
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  unlink(path.c_str());
  return bytes / s / 1e9;
}

pb::ModelSpec ExportModel(int units, int64_t rows, int w) {
  pb::ModelSpec spec;
  for (int u = 0; u < units; ++u) {
    pb::UnitSpec* unit = spec.add_units();
    unit->set_name(absl::StrCat("layer", u));
    pb::TensorSpec* w = unit->add_tensors();
    w->set_name("weight");
    w->add_shape(rows);
    w->add_shape(1024);
    w->set_dtype(pb::DTYPE_FP32);
    w->mutable_init()->mutable_constant()->set_value(0.5f);
  }
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(w == 1 ? pb::SHARDING_STRATEGY_NO_SHARD
                         : pb::SHARDING_STRATEGY_FULL_SHARD);
  c->set_sharding_factor(w);
  c->set_max_gathered_units(1);
  pb::AdamW* adamw = c->mutable_optimizer()->mutable_adamw();
  adamw->set_lr(1e-3);
  adamw->set_beta1(0.9);
  adamw->set_beta2(0.999);
  adamw->set_eps(1e-8);
  return spec;
}

// W = F = w ranks in this process (w = 1: no gather, the writer's path
// alone; w = 2: Gloo gathers over loopback). Figures get `suffix`.
absl::Status FullExportAt(int w, const std::string& suffix,
                          const Options& options, BenchReport& report) {
  const int units = options.quick ? 8 : 16;
  const int64_t rows = options.quick ? 2048 : 4096;  // x 1024 fp32.
  const int64_t unit_bytes = rows * 1024 * 4;
  const int reps = options.quick ? 3 : 5;
  coordinator::InProcessCoordinatorOptions co;
  co.coordinator.membership.world_size = w;
  co.coordinator.membership.sharding_factor = w;
  auto coordinator = coordinator::InProcessCoordinator::Start(co);
  if (!coordinator.ok()) return coordinator.status();
  std::vector<std::unique_ptr<node::NodeManager>> nodes(w);
  std::vector<absl::Status> started(w);
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r) {
    threads.emplace_back([&, r] {
      node::NodeOptions o;
      o.coordinator_address = (*coordinator)->address();
      o.identity = absl::StrCat("bench-", r);
      o.rank = r;
      o.peer_address = absl::StrCat("127.0.0.1:", 1000 + r);
      o.shm_dir = options.dir;
      o.shm_prefix = absl::StrCat("bench-state-r", r);
      o.collective_timeout = absl::Seconds(60);
      auto made = node::NodeManager::Start(o);
      if (!made.ok()) {
        started[r] = made.status();
        return;
      }
      nodes[r] = std::move(*made);
      pb::RegisterModelRequest reg;
      *reg.mutable_model() = ExportModel(units, rows, w);
      started[r] =
          nodes[r]->RegisterModel(reg, MonoNow() + absl::Minutes(2)).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : started) {
    if (!s.ok()) return s;
  }
  const std::string path =
      absl::StrCat(options.dir, "/bench-export.safetensors");
  std::vector<double> export_gbps, disk_gbps, ratios;
  int64_t file_bytes = 0, rss_growth = 0;
  for (int rep = 0; rep < reps; ++rep) {
    ResetPeakRss();
    const int64_t before = PeakRssBytes();
    for (const auto& node : nodes) {
      // A ready epoch first (the coordinator may still be settling).
      const auto ready =
          node->WaitReady(pb::WaitReadyRequest(), MonoNow() + absl::Minutes(1));
      if (!ready.ok()) return ready.status();
    }
    std::vector<absl::StatusOr<pb::ExportStateResponse>> results(
        w, absl::UnknownError("not run"));
    pb::ExportStateRequest request;
    request.set_path(path);
    request.set_layout(pb::EXPORT_LAYOUT_FULL);
    request.set_include_optimizer_state(true);
    request.set_overwrite(true);
    const auto start = std::chrono::steady_clock::now();
    threads.clear();
    for (int r = 0; r < w; ++r) {
      threads.emplace_back([&, r] {
        results[r] =
            nodes[r]->ExportState(request, MonoNow() + absl::Minutes(10));
      });
    }
    for (auto& t : threads) t.join();
    const double s = Seconds(std::chrono::steady_clock::now() - start);
    rss_growth = std::max(rss_growth, PeakRssBytes() - before);
    for (const auto& result : results) {
      if (!result.ok()) return result.status();
    }
    file_bytes = results[0]->files(0).bytes();
    unlink(path.c_str());
    export_gbps.push_back(file_bytes / s / 1e9);
    absl::StatusOr<double> disk = DiskWriteGbps(options.dir, file_bytes);
    if (!disk.ok()) return disk.status();
    disk_gbps.push_back(*disk);
    ratios.push_back(export_gbps.back() / *disk);
  }
  nodes.clear();
  // The ratio pairs each export with the write right after it (the disk's
  // speed drifts on a shared machine), median over the repetitions.
  const double e = Median(export_gbps), d = Median(disk_gbps),
               ratio = Median(ratios);
  report.AddRow(
      {{"case", std::string("full_export")},
       {"W", static_cast<double>(w)},
       {"F", static_cast<double>(w)},
       {"units", static_cast<double>(units)},
       {"unit_MiB", static_cast<double>(unit_bytes / kMiB)},
       {"file_MiB", static_cast<double>(file_bytes) / kMiB},
       {"reps", static_cast<double>(reps)},
       {"export_GBps", e},
       {"disk_write_GBps", d},
       {"ratio", ratio},
       {"rss_growth_MiB", static_cast<double>(rss_growth) / kMiB},
       {"rss_growth_units", static_cast<double>(rss_growth) / unit_bytes}});
  report.SetFigure(absl::StrCat("export_gbps", suffix), e);
  report.SetFigure(absl::StrCat("disk_write_gbps", suffix), d);
  report.SetFigure(absl::StrCat("export_to_disk_write_ratio", suffix), ratio);
  report.SetFigure(absl::StrCat("export_rss_growth_units", suffix),
                   static_cast<double>(rss_growth) / unit_bytes);
  return absl::OkStatus();
}

// The headline figures at W = F = 2 (real gathers); W = 1 as _w1.
absl::Status FullExport(const Options& options, BenchReport& report) {
  if (absl::Status s = FullExportAt(2, "", options, report); !s.ok()) return s;
  return FullExportAt(1, "_w1", options, report);
}

struct Case {
  std::string name;
  std::function<absl::Status(const Options&, BenchReport&)> run;
};

std::vector<Case> Cases() { return {{"full_export", FullExport}}; }

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--quick] [--out=PATH] [--dir=DIR] [--case=NAME]\n";
  return 2;
}

int Run(const Options& options) {
  BenchReport report("state");
  bool ran = false;
  for (const Case& c : Cases()) {
    if (!options.only_case.empty() && c.name != options.only_case) continue;
    ran = true;
    if (absl::Status s = c.run(options, report); !s.ok()) {
      std::cerr << c.name << ": " << s << "\n";
      return 1;
    }
  }
  if (!ran) {
    std::cerr << "no case named " << options.only_case << "\n";
    return 2;
  }
  std::cout << report.Table() << std::flush;
  if (!options.out.empty()) {
    if (absl::Status status = report.WriteJson(options.out); !status.ok()) {
      std::cerr << status << "\n";
      return 1;
    }
    std::cout << "wrote " << options.out << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  shardd::bench::Options options;
  const char* tmp = getenv("TMPDIR");
  options.dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      options.quick = true;
    } else if (absl::StartsWith(arg, "--out=")) {
      options.out = arg.substr(6);
    } else if (absl::StartsWith(arg, "--dir=")) {
      options.dir = arg.substr(6);
    } else if (absl::StartsWith(arg, "--case=")) {
      options.only_case = arg.substr(7);
    } else {
      return shardd::bench::Usage(argv[0]);
    }
  }
  return shardd::bench::Run(options);
}
