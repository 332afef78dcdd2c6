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
//   register     RegisterModel of a model whose initial values (fp32, 16
//                units of 4096 x 4096: 1 GiB; --quick: 8 units of 2048 x
//                2048, 128 MiB) lie in the trainer's shared-memory file
//                under /dev/shm (TensorInit.shared_memory), at W = F = 2
//                through real shardd daemons and a coordinator (a fresh
//                cluster per repetition, started untimed). Timed: both
//                ranks' RegisterModel calls, from the first call to the
//                last reply (each daemon checksums the whole range, the
//                ranks agree on the digests, then each reads its slice).
//                Beside it a memcpy of the same bytes from the same file
//                into a warm buffer. Repetitions alternate (3; --quick 2).
//                Figures: register_gbps (initial-value bytes / wall time),
//                memcpy_gbps, register_gbps_to_memcpy_ratio (target >=
//                0.7; median of each registration's ratio to the best of
//                three memcpys right after it). What bounds it, in the row:
//                the busier daemon's CPU time, its memory plan, this
//                machine's CRC-32C speed over the same bytes (each daemon
//                checksums them all) and its speed of creating fresh
//                shared-memory segments (each daemon creates and touches
//                its whole plan), and register_plan_touch_share, the share of
//                the wall time that creating the plan accounts for (the
//                creation speed sampled on up to 256 MiB right after each
//                registration, one thread; the daemons create theirs side by
//                side, so this is an estimate, and can exceed 1).
//   load         RegisterModel with load_from = a FULL export (parameters,
//                the same model and sizes as `register`, written once by
//                that model's first job) at W = F = 2 through real daemons,
//                a fresh cluster per repetition. Beside it a sequential
//                read of the same file in 8 MiB pieces (read(2), as dd).
//                Before each timed read, load or dd, the file's pages are
//                dropped from the page cache (fsync + posix_fadvise
//                DONTNEED; the row's `cached_before` says what mincore saw
//                left, 0 when the drop worked), so both read the disk (or
//                whatever caches below this kernel, a VM's host, alike).
//                Figures: load_gbps (file bytes / wall time), disk_read_gbps,
//                load_to_disk_read_ratio (target >= 0.7, median of paired
//                ratios as above), load_plan_touch_share as above.
// A case is a function of the options and the report; add one to Cases().
//
// --dir=DIR (default $TMPDIR or /tmp): where the files go (the disk
// measured); they are removed afterwards. --bin_dir=DIR (default
// bazel-bin): where daemon/node/shardd and daemon/coordinator/coordinator
// are taken from (scripts/bench builds them with this binary).
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "client/trainer_client.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/mono_time.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/node/coordinator_ports.h"
#include "daemon/node/node_manager.h"
#include "daemon/testing/subprocess.h"
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
  std::string bin_dir = "bazel-bin";
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
      node::UseCoordinator((*coordinator)->address(), nullptr, &o);
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

// ------------------------------------------- real daemons (register, load)

// A coordinator and W = F = 2 shardd daemons (CPU) in a fresh directory
// under `dir`, with a TrainerClient per rank. Destruction stops them
// (SIGTERM, then SIGKILL through Subprocess) and removes the directory.
// Not thread-safe; owns the processes.
class DaemonCluster {
 public:
  static constexpr int kW = 2;

  ~DaemonCluster() { Stop(); }

  absl::Status Start(const Options& options) {
    std::string tmpl = absl::StrCat(options.dir, "/shardd-bench-state.XXXXXX");
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::ErrnoToStatus(errno, tmpl);
    }
    dir_ = tmpl;
    // The daemons' segments in /dev/shm, their default and a deployment's
    // (under --dir, an ext4 /tmp, every page of the plan would be a page
    // of a disk file).
    std::string shm_tmpl = "/dev/shm/shardd-bench-state.XXXXXX";
    if (mkdtemp(shm_tmpl.data()) == nullptr) {
      return absl::ErrnoToStatus(errno, shm_tmpl);
    }
    shm_dir_ = shm_tmpl;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<tests::Subprocess>> coordinator =
        Launch(options.bin_dir + "/daemon/coordinator/coordinator",
               {"--listen=127.0.0.1:0", absl::StrCat("--world_size=", kW),
                absl::StrCat("--sharding_factor=", kW)},
               "coordinator");
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = std::move(*coordinator);
    absl::StatusOr<std::string> line =
        coordinator_->WaitForLine("listening on", deadline);
    if (!line.ok()) return line.status();
    // "coordinator listening on 127.0.0.1:PORT (...)"
    std::vector<std::string> words = absl::StrSplit(*line, ' ');
    if (words.size() < 4) return absl::InternalError(*line);
    for (int r = 0; r < kW; ++r) {
      absl::StatusOr<std::unique_ptr<tests::Subprocess>> daemon = Launch(
          options.bin_dir + "/daemon/node/shardd",
          {absl::StrCat("--coordinator=", words[3]),
           absl::StrCat("--identity=node-", r), absl::StrCat("--rank=", r),
           absl::StrCat("--listen_unix=", Socket(r)),
           "--peer_listen=127.0.0.1:0", absl::StrCat("--shm_dir=", shm_dir_),
           "--device=cpu", "--collective_timeout_ms=120000"},
          absl::StrCat("shardd-", r));
      if (!daemon.ok()) return daemon.status();
      daemons_.push_back(std::move(*daemon));
    }
    for (auto& daemon : daemons_) {
      absl::StatusOr<std::string> up =
          daemon->WaitForLine("listening on", deadline);
      if (!up.ok()) return up.status();
    }
    for (int r = 0; r < kW; ++r) {
      absl::StatusOr<std::unique_ptr<client::TrainerClient>> c =
          client::TrainerClient::Create({.target = Socket(r)});
      if (!c.ok()) return c.status();
      clients_.push_back(std::move(*c));
    }
    // A ready epoch on both ranks (GetStatus.ready; WaitReady wants a
    // registered model), so that the timed calls find the communicators
    // formed.
    for (auto& c : clients_) {
      for (;;) {
        absl::StatusOr<v1::GetStatusResponse> status = c->GetStatus();
        if (status.ok() && status->ready()) break;
        if (absl::Now() > deadline) {
          return absl::DeadlineExceededError(absl::StrCat(
              c->target(), " not ready within 60 s (logs in ", dir_, ")"));
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
    return absl::OkStatus();
  }

  // What one registration on both ranks took.
  struct Registration {
    double seconds = 0;      // First call to last reply.
    double cpu_seconds = 0;  // The busier daemon's CPU time (user + sys).
    int64_t plan_bytes = 0;  // Rank 0's planned memory.
  };

  // `request` on both ranks at once.
  absl::StatusOr<Registration> RegisterBoth(
      const pb::RegisterModelRequest& request) {
    std::vector<absl::StatusOr<pb::RegisterModelResponse>> results(
        kW, absl::UnknownError("not run"));
    std::vector<double> cpu_before(kW);
    for (int r = 0; r < kW; ++r) cpu_before[r] = CpuSeconds(r);
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] {
        results[r] =
            clients_[r]->RegisterModel(request, MonoNow() + absl::Minutes(5));
      });
    }
    for (auto& t : threads) t.join();
    Registration registration;
    registration.seconds = Seconds(std::chrono::steady_clock::now() - start);
    for (int r = 0; r < kW; ++r) {
      if (!results[r].ok()) {
        const absl::Status& s = results[r].status();
        return absl::Status(
            s.code(), absl::StrCat("rank ", r, ": ", s.message(), " (logs in ",
                                   dir_, ")"));
      }
      registration.cpu_seconds =
          std::max(registration.cpu_seconds, CpuSeconds(r) - cpu_before[r]);
    }
    registration.plan_bytes = results[0]->memory().planned().total_bytes();
    return registration;
  }

  // ExportState `request` on both ranks at once (rank 0 writes the file).
  absl::Status ExportBoth(const pb::ExportStateRequest& request) {
    std::vector<absl::Status> results(kW);
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([&, r] {
        results[r] = clients_[r]
                         ->ExportState(request, MonoNow() + absl::Minutes(10))
                         .status();
      });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& s : results) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  void Stop() {
    clients_.clear();
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (auto& d : daemons_) d->Signal(SIGTERM);
    for (auto& d : daemons_) (void)d->Wait(deadline);
    daemons_.clear();  // SIGKILL to any still running.
    if (coordinator_ != nullptr) {
      coordinator_->Signal(SIGTERM);
      (void)coordinator_->Wait(absl::Now() + absl::Seconds(5));
      coordinator_.reset();
    }
    for (std::string* dir : {&dir_, &shm_dir_}) {
      if (dir->empty()) continue;
      std::error_code ignored;
      std::filesystem::remove_all(*dir, ignored);
      dir->clear();
    }
  }

 private:
  std::string Socket(int r) const {
    return absl::StrCat(dir_, "/shardd-", r, ".sock");
  }

  // Daemon r's CPU time so far (utime + stime of /proc/PID/stat), 0 if
  // unreadable.
  double CpuSeconds(int r) const {
    std::ifstream in(absl::StrCat("/proc/", daemons_[r]->pid(), "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    // Fields after the command name "(...)": state is field 3, utime 14.
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) return 0;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(paren + 2), ' ');
    int64_t utime = 0, stime = 0;
    if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
        !absl::SimpleAtoi(fields[12], &stime)) {
      return 0;
    }
    return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
  }

  // `binary` with `args`, its stderr appended to a log in the directory
  // (stdout is read through the Subprocess pipe).
  absl::StatusOr<std::unique_ptr<tests::Subprocess>> Launch(
      const std::string& binary, const std::vector<std::string>& args,
      const std::string& name) {
    std::vector<std::string> argv = {
        "/bin/sh", "-c",
        absl::StrCat("exec \"$0\" \"$@\" 2>>'", dir_, "/", name, ".log'"),
        binary};
    argv.insert(argv.end(), args.begin(), args.end());
    return tests::Subprocess::Spawn(std::move(argv), name);
  }

  std::string dir_;      // Sockets and logs, under Options::dir.
  std::string shm_dir_;  // The daemons' --shm_dir, under /dev/shm.
  std::unique_ptr<tests::Subprocess> coordinator_;
  std::vector<std::unique_ptr<tests::Subprocess>> daemons_;
  std::vector<std::unique_ptr<client::TrainerClient>> clients_;
};

// The model of `register` and `load`: `units` units of one [rows, rows]
// fp32 tensor "w", FULL_SHARD at W = F = 2, SGD. With `values`, unit u's
// initial values are the u-th range of that shared-memory file; without,
// a constant (load_from replaces it).
pb::ModelSpec InitModel(int units, int64_t rows,
                        const memory::SharedMemorySegment* values) {
  pb::ModelSpec spec;
  const int64_t bytes = rows * rows * 4;
  for (int u = 0; u < units; ++u) {
    pb::UnitSpec* unit = spec.add_units();
    unit->set_name(absl::StrCat("layer", u));
    pb::TensorSpec* t = unit->add_tensors();
    t->set_name("w");
    t->add_shape(rows);
    t->add_shape(rows);
    t->set_dtype(pb::DTYPE_FP32);
    if (values == nullptr) {
      t->mutable_init()->mutable_constant()->set_value(0.0f);
      continue;
    }
    pb::SharedMemoryRef* ref = t->mutable_init()->mutable_shared_memory();
    ref->set_path(values->path());
    ref->set_segment_bytes(values->size());
    ref->set_byte_offset(u * bytes);
    ref->set_byte_length(bytes);
  }
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(pb::SHARDING_STRATEGY_FULL_SHARD);
  c->set_sharding_factor(DaemonCluster::kW);
  c->set_max_gathered_units(1);
  c->mutable_optimizer()->mutable_sgd()->set_lr(0.01);
  return spec;
}

struct InitSize {
  int units;
  int64_t rows;
  int64_t bytes() const { return units * rows * rows * 4; }
};
InitSize InitSizeFor(const Options& options) {
  return options.quick ? InitSize{8, 2048} : InitSize{16, 4096};
}

// The trainer's initial values: a new file under /dev/shm holding `bytes`
// of varied fp32 values (every page written, as a trainer would).
absl::StatusOr<memory::SharedMemorySegment> MakeInitValues(int64_t bytes) {
  absl::StatusOr<memory::SharedMemorySegment> seg =
      memory::SharedMemorySegment::Create(
          "/dev/shm", absl::StrCat("shardd-bench-init-", getpid()), bytes);
  if (!seg.ok()) return seg.status();
  float* p = static_cast<float*>(seg->mutable_data());
  for (int64_t i = 0; i < bytes / 4; ++i) {
    p[i] = static_cast<float>(i % 4093) * 0.001f - 2.0f;
  }
  return seg;
}

// memcpy of `bytes` from `src` into `dst` (already touched): GB/s.
double MemcpyGbps(const void* src, char* dst, int64_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  std::memcpy(dst, src, bytes);
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  // Keeps the copy from being optimised away.
  volatile char sink = dst[bytes - 1];
  (void)sink;
  return bytes / s / 1e9;
}

// Writes `bytes` from `src` into a new file under /dev/shm with write(2) in
// 8 MiB pieces, then removes it: `cp` (or `dd of=/dev/shm/...`) into
// memory that did not exist before, as a registration's bytes must land:
// GB/s, 0 if it fails. `src` may be null: then from a warm 8 MiB buffer
// (the bytes come from `read_fd` when it is >= 0: dd from a file).
double FreshShmWriteGbps(const char* src, int64_t bytes, int read_fd = -1) {
  const std::string path =
      absl::StrCat("/dev/shm/shardd-bench-fresh-", getpid());
  std::vector<char> piece(8 * kMiB);
  const auto start = std::chrono::steady_clock::now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 0;
  absl::Cleanup remover = [fd, &path] {
    close(fd);
    unlink(path.c_str());
  };
  int64_t done = 0;
  while (done < bytes) {
    const int64_t n = std::min<int64_t>(piece.size(), bytes - done);
    const char* from = src != nullptr ? src + done : piece.data();
    if (read_fd >= 0) {
      const ssize_t r = read(read_fd, piece.data(), n);
      if (r <= 0) return 0;
      from = piece.data();
      if (write(fd, from, r) != r) return 0;
      done += r;
      continue;
    }
    if (write(fd, from, n) != n) return 0;
    done += n;
  }
  return bytes / Seconds(std::chrono::steady_clock::now() - start) / 1e9;
}

// The share of a registration's wall time `wall_s` that creating a
// daemon's memory plan of `plan_bytes` at `first_touch_gbps` accounts for
// (each daemon creates and touches its plan's segments while registering).
double PlanTouchShare(int64_t plan_bytes, double first_touch_gbps,
                      double wall_s) {
  if (first_touch_gbps <= 0 || wall_s <= 0) return 0;
  return plan_bytes / first_touch_gbps / 1e9 / wall_s;
}

// How much fresh memory SegmentCreateGbps samples (the rate, not the whole
// plan: a 1 GiB plan can take seconds on the development VM).
constexpr int64_t kTouchSampleBytes = 256 * kMiB;

// Creates a new shared-memory segment of `bytes` under /dev/shm and
// removes it, the way a daemon creates its plan's segments (fallocate,
// map, populate and touch every page; memory/shared_memory_segment.h):
// GB/s, 0 if it fails.
double SegmentCreateGbps(int64_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<memory::SharedMemorySegment> segment =
      memory::SharedMemorySegment::Create(
          "/dev/shm", absl::StrCat("shardd-bench-touch-", getpid()), bytes);
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  return segment.ok() ? bytes / s / 1e9 : 0;  // Removed on destruction.
}

absl::Status Register(const Options& options, BenchReport& report) {
  const InitSize size = InitSizeFor(options);
  const int64_t bytes = size.bytes();
  const int reps = options.quick ? 2 : 3;
  absl::StatusOr<memory::SharedMemorySegment> values = MakeInitValues(bytes);
  if (!values.ok()) return values.status();
  // The segment object removes its file when destroyed (it created it).
  pb::RegisterModelRequest request;
  *request.mutable_model() = InitModel(size.units, size.rows, &*values);
  request.set_transport(pb::TRANSPORT_SHARED_MEMORY);

  std::vector<char> dst(bytes, 1);  // Touched: memcpy's bandwidth alone.
  std::vector<double> register_gbps, memcpy_gbps, ratios, wall, cpu, touch,
      touch_share, fresh_gbps, fresh_ratios;
  int64_t plan_bytes = 0;
  for (int rep = 0; rep < reps; ++rep) {
    DaemonCluster cluster;
    if (absl::Status s = cluster.Start(options); !s.ok()) return s;
    absl::StatusOr<DaemonCluster::Registration> done =
        cluster.RegisterBoth(request);
    if (!done.ok()) return done.status();
    cluster.Stop();
    register_gbps.push_back(bytes / done->seconds / 1e9);
    wall.push_back(done->seconds);
    cpu.push_back(done->cpu_seconds);
    plan_bytes = done->plan_bytes;
    // The best of three: the first copy after a cluster's exit can run
    // 100x slow (the kernel reclaiming the daemons' memory on this VM),
    // which is not the machine's copy speed.
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      best = std::max(best, MemcpyGbps(values->data(), dst.data(), bytes));
    }
    memcpy_gbps.push_back(best);
    ratios.push_back(register_gbps.back() / memcpy_gbps.back());
    fresh_gbps.push_back(
        FreshShmWriteGbps(static_cast<const char*>(values->data()), bytes));
    fresh_ratios.push_back(
        fresh_gbps.back() > 0 ? register_gbps.back() / fresh_gbps.back() : 0);
    touch.push_back(SegmentCreateGbps(std::min(plan_bytes, kTouchSampleBytes)));
    touch_share.push_back(
        PlanTouchShare(plan_bytes, touch.back(), done->seconds));
  }
  // What each daemon does first over all the bytes: CRC-32C.
  const auto crc_start = std::chrono::steady_clock::now();
  volatile uint32_t crc = core::Crc32c(values->data(), bytes);
  (void)crc;
  const double crc_gbps =
      bytes / Seconds(std::chrono::steady_clock::now() - crc_start) / 1e9;

  const double g = Median(register_gbps), m = Median(memcpy_gbps),
               ratio = Median(ratios);
  report.AddRow({{"case", std::string("register")},
                 {"W", static_cast<double>(DaemonCluster::kW)},
                 {"F", static_cast<double>(DaemonCluster::kW)},
                 {"units", static_cast<double>(size.units)},
                 {"values_MiB", static_cast<double>(bytes) / kMiB},
                 {"reps", static_cast<double>(reps)},
                 {"register_GBps", g},
                 {"memcpy_GBps", m},
                 {"ratio", ratio},
                 {"fresh_copy_GBps", Median(fresh_gbps)},
                 {"fresh_ratio", Median(fresh_ratios)},
                 {"wall_s", Median(wall)},
                 {"daemon_cpu_s", Median(cpu)},
                 {"plan_MiB", static_cast<double>(plan_bytes) / kMiB},
                 {"crc32c_GBps", crc_gbps},
                 {"segment_create_GBps", Median(touch)},
                 {"plan_touch_share", Median(touch_share)}});
  report.SetFigure("register_gbps", g);
  report.SetFigure("memcpy_gbps", m);
  report.SetFigure("register_gbps_to_memcpy_ratio", ratio);
  report.SetFigure("fresh_copy_gbps", Median(fresh_gbps));
  report.SetFigure("register_gbps_to_fresh_copy_ratio", Median(fresh_ratios));
  report.SetFigure("register_plan_touch_share", Median(touch_share));
  return absl::OkStatus();
}

// Drops `path`'s pages from the page cache (fsync, then
// POSIX_FADV_DONTNEED; no root needed, this file only) and returns the
// fraction of its pages still resident afterwards (mincore).
absl::StatusOr<double> DropFromPageCache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  absl::Cleanup closer = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, path);
  fsync(fd);
  if (const int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); e != 0) {
    return absl::ErrnoToStatus(e, path);
  }
  void* map = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return absl::ErrnoToStatus(errno, path);
  absl::Cleanup unmapper = [map, &st] { munmap(map, st.st_size); };
  const int64_t page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> resident((st.st_size + page - 1) / page);
  if (mincore(map, st.st_size, resident.data()) != 0) {
    return absl::ErrnoToStatus(errno, path);
  }
  int64_t n = 0;
  for (unsigned char r : resident) n += r & 1;
  return static_cast<double>(n) / resident.size();
}

// Reads `path` sequentially in 8 MiB pieces (as dd): GB/s.
absl::StatusOr<double> DiskReadGbps(const std::string& path, int64_t* bytes) {
  std::vector<char> piece(8 * kMiB);
  const auto start = std::chrono::steady_clock::now();
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::ErrnoToStatus(errno, path);
  int64_t done = 0;
  for (;;) {
    const ssize_t r = read(fd, piece.data(), piece.size());
    if (r < 0) {
      close(fd);
      return absl::ErrnoToStatus(errno, path);
    }
    if (r == 0) break;
    done += r;
  }
  close(fd);
  *bytes = done;
  return done / Seconds(std::chrono::steady_clock::now() - start) / 1e9;
}

absl::Status Load(const Options& options, BenchReport& report) {
  const InitSize size = InitSizeFor(options);
  const int reps = options.quick ? 2 : 3;
  const std::string path = absl::StrCat(options.dir, "/bench-load.safetensors");
  absl::Cleanup remover = [&path] { unlink(path.c_str()); };
  {
    // The file: the FULL export (parameters) of a job of the same model.
    absl::StatusOr<memory::SharedMemorySegment> values =
        MakeInitValues(size.bytes());
    if (!values.ok()) return values.status();
    pb::RegisterModelRequest request;
    *request.mutable_model() = InitModel(size.units, size.rows, &*values);
    request.set_transport(pb::TRANSPORT_SHARED_MEMORY);
    DaemonCluster cluster;
    if (absl::Status s = cluster.Start(options); !s.ok()) return s;
    if (auto s = cluster.RegisterBoth(request); !s.ok()) return s.status();
    pb::ExportStateRequest exported;
    exported.set_path(path);
    exported.set_layout(pb::EXPORT_LAYOUT_FULL);
    exported.set_include_optimizer_state(false);
    exported.set_overwrite(true);
    if (absl::Status s = cluster.ExportBoth(exported); !s.ok()) return s;
  }
  pb::RegisterModelRequest request;
  *request.mutable_model() = InitModel(size.units, size.rows, nullptr);
  request.set_load_from(path);
  std::vector<double> load_gbps, read_gbps, ratios, wall, cpu, touch,
      touch_share, fresh_gbps, fresh_ratios;
  double cached_before = 0;
  int64_t file_bytes = 0, plan_bytes = 0;
  for (int rep = 0; rep < reps; ++rep) {
    DaemonCluster cluster;
    if (absl::Status s = cluster.Start(options); !s.ok()) return s;
    absl::StatusOr<double> cached = DropFromPageCache(path);
    if (!cached.ok()) return cached.status();
    cached_before = std::max(cached_before, *cached);
    absl::StatusOr<DaemonCluster::Registration> done =
        cluster.RegisterBoth(request);
    if (!done.ok()) return done.status();
    cluster.Stop();
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, path);
    file_bytes = st.st_size;
    load_gbps.push_back(file_bytes / done->seconds / 1e9);
    wall.push_back(done->seconds);
    cpu.push_back(done->cpu_seconds);
    plan_bytes = done->plan_bytes;
    cached = DropFromPageCache(path);
    if (!cached.ok()) return cached.status();
    cached_before = std::max(cached_before, *cached);
    int64_t read_bytes = 0;
    absl::StatusOr<double> disk = DiskReadGbps(path, &read_bytes);
    if (!disk.ok()) return disk.status();
    read_gbps.push_back(*disk);
    ratios.push_back(load_gbps.back() / *disk);
    // dd of the file into memory that did not exist before (the page
    // cache dropped again first).
    cached = DropFromPageCache(path);
    if (!cached.ok()) return cached.status();
    cached_before = std::max(cached_before, *cached);
    {
      const int in = open(path.c_str(), O_RDONLY);
      if (in < 0) return absl::ErrnoToStatus(errno, path);
      fresh_gbps.push_back(FreshShmWriteGbps(nullptr, file_bytes, in));
      close(in);
    }
    fresh_ratios.push_back(
        fresh_gbps.back() > 0 ? load_gbps.back() / fresh_gbps.back() : 0);
    touch.push_back(SegmentCreateGbps(std::min(plan_bytes, kTouchSampleBytes)));
    touch_share.push_back(
        PlanTouchShare(plan_bytes, touch.back(), done->seconds));
  }
  const double l = Median(load_gbps), d = Median(read_gbps),
               ratio = Median(ratios);
  report.AddRow({{"case", std::string("load")},
                 {"W", static_cast<double>(DaemonCluster::kW)},
                 {"F", static_cast<double>(DaemonCluster::kW)},
                 {"units", static_cast<double>(size.units)},
                 {"file_MiB", static_cast<double>(file_bytes) / kMiB},
                 {"reps", static_cast<double>(reps)},
                 {"load_GBps", l},
                 {"disk_read_GBps", d},
                 {"ratio", ratio},
                 {"fresh_read_GBps", Median(fresh_gbps)},
                 {"fresh_ratio", Median(fresh_ratios)},
                 {"wall_s", Median(wall)},
                 {"daemon_cpu_s", Median(cpu)},
                 {"plan_MiB", static_cast<double>(plan_bytes) / kMiB},
                 {"segment_create_GBps", Median(touch)},
                 {"plan_touch_share", Median(touch_share)},
                 {"cached_before", cached_before}});
  report.SetFigure("load_gbps", l);
  report.SetFigure("disk_read_gbps", d);
  report.SetFigure("load_to_disk_read_ratio", ratio);
  report.SetFigure("fresh_read_gbps", Median(fresh_gbps));
  report.SetFigure("load_to_fresh_read_ratio", Median(fresh_ratios));
  report.SetFigure("load_plan_touch_share", Median(touch_share));
  return absl::OkStatus();
}

struct Case {
  std::string name;
  std::function<absl::Status(const Options&, BenchReport&)> run;
};

std::vector<Case> Cases() {
  return {{"full_export", FullExport}, {"register", Register}, {"load", Load}};
}

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--quick] [--out=PATH] [--dir=DIR] [--case=NAME] "
               "[--bin_dir=DIR]\n";
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
  return report.Publish(options.out, std::cout, std::cerr);
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
    } else if (absl::StartsWith(arg, "--bin_dir=")) {
      options.bin_dir = arg.substr(10);
    } else {
      return shardd::bench::Usage(argv[0]);
    }
  }
  return shardd::bench::Run(options);
}
