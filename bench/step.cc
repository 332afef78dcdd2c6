// bench/step: one training step of the example model on a local cluster of
// W = 4 shardd daemons, per sharding configuration (F = 1 NO_SHARD,
// F = 2 HYBRID_SHARD, F = 4 FULL_SHARD), plus the control-path overhead of a
// Gather over the Unix socket and the gather bandwidth against memcpy.
//
// The model is fixed so that the figures can be set beside PyTorch runs of
// the same model: 4 Linear layers of 2048 x 2048 with bias (widths
// 2048,2048,2048,2048,2048, ReLU between layers, MSE loss), batch 64 per
// rank, AdamW (lr 1e-2, weight decay 0, torch's betas/eps), global gradient
// clipping at norm 1.0, fp32 parameters and gradients. The PyTorch
// counterpart is
//   model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)]) (ReLU
//   between), FSDP(model, sharding_strategy=FULL_SHARD | HYBRID_SHARD |
//   NO_SHARD, auto_wrap_policy wrapping each Linear as one unit,
//   limit_all_gathers=True), torch.optim.AdamW(lr=1e-2, weight_decay=0),
//   clip_grad_norm_(1.0), 64 samples of 2048 features per rank per step,
//   torchrun --nproc_per_node=4 with the gloo backend on CPU,
// timed as the median wall time per step after the same warm-up.
//
// How it runs: for each configuration it starts a coordinator and W shardd
// processes (CPU backend, Unix sockets and shared memory in a fresh
// directory under /tmp), then W //client:example_trainer processes (one per
// rank; the ranks are not driven from this process). The trainers first run
// the warm-up steps and exit; GetStatus is read on every daemon; a second
// set of trainers re-attaches and runs the measured steps, and GetStatus is
// read again. Step time is the median interval between consecutive "step N"
// lines of rank 0 (observed here, so it includes the line's trip through a
// pipe, microseconds). Bytes moved per step per rank is the difference of
// the daemons' collective counters (bytes_sent, ring rule) over the
// measured steps, divided by their number; the largest over the ranks is
// reported; the columns give rank 0's calls and MB per collective kind.
// In the FULL_SHARD cluster a third set of trainers then runs as many
// measured steps with --reshard_after_forward (each unit released with
// Release.reshard after its forward, as FSDP's reshard_after_forward frees
// it), a second FULL_SHARD row, and then as many with --daemon_prefetch
// (synchronous Gathers naming the next unit as the daemon's prefetch hint
// instead of the trainer's asynchronous Gathers: the same collectives, the
// overlap done in the daemon), a third row and the figure
// step_ms_full_shard_daemon_prefetch_w4. Two byte ratios come out of it:
//   - bytes_ratio_full_to_noshard: the algorithm's, from the resharding
//     run: every unit is gathered again for backward, 4 AG + 4 AG + 4 RS
//     against 4 AR of (W-1)/W psi each by the ring rule (an AR counts 2):
//     12 / 8 = 1.5 (the ninth AllGather call carries the clipping norms, a
//     few bytes);
//   - bytes_ratio_full_to_noshard_cached: the default trainer's, K = 2:
//     the last two units are still in the daemon's gathered slots when
//     backward starts and are answered from there (Gather's was_ready), so
//     6 unit AllGathers per step: (6 + 4) / 8 = 1.25. The cache is a real
//     saving, not a measuring error.
// Two more FULL_SHARD clusters run the default trainer with every daemon
// writing a checkpoint of every step (--checkpoint_interval_steps=1 into
// the cluster's directory under /tmp, a real disk, fsynced): "sync" (the
// write inside the Step that commits it) and "async" (--async_checkpoints:
// a copy into host staging, written in the background; one due while the
// previous is still being written is skipped). Figures:
// step_ms_full_shard_ckpt_{sync,async}_w4, their ratios to the cluster
// without checkpoints (ckpt_{sync,async}_step_ratio_to_no_ckpt) and the
// share of rank 0's checkpoints the async run skipped
// (ckpt_async_skipped_share, from its log).
// step_ms_full_shard_w4 is the default trainer's;
// step_ms_full_shard_reshard_w4 the resharding one's. Peak parameter memory
// is the daemon's planned figure against sum(psi_i)/F + K * max(psi_i) (fp32
// psi from the units' numel; K = 2, the example trainer's
// max_gathered_units).
//
// In the FULL_SHARD cluster, after training, this process registers again on
// every rank (re-attach, one thread and one TrainerClient per rank) and
// measures:
//   - Gather RPC latency for a unit that is already gathered (the daemon
//     answers from its table: no collective), p50 and p99 over the calls
//     of rank 0: the control-path overhead of the Unix-socket API;
//   - the floor of that figure in the same loop: each Gather is followed
//     by a Release of a unit that is not gathered (the daemon looks it up
//     and answers was_gathered = false), the cheapest call of the API over
//     the same channel and server (rpc_floor_p50_us); on this shared 2-core
//     machine the load moves both by 2x from run to run, their difference
//     much less;
//   - the cost per call of that loop (both kinds): CPU time of rank 0's
//     daemon (/proc/PID/stat, 10 ms ticks) and of this process, and this
//     process's time slices (wake-ups) per call. The other ranks wait on a
//     notification meanwhile, not inside a gRPC call: a thread blocked in a
//     call of this process could become its gRPC poller and take every
//     reply first (5 more wake-ups per call were measured that way);
//   - gather bandwidth: fresh AllGathers of one unit (Gather then Release,
//     all ranks), unit bytes / median Gather time, against memcpy of the
//     same number of bytes in this process (buffers pre-faulted).
//
// The step profile (issue #21): every example trainer runs with --profile
// and prints, per step, the time it spent computing (batch, forward, loss,
// backward), blocked in Gather, in ReduceGrad, in Step (the vote and the
// optimizer) and the rest (Release and bookkeeping). A second table gives
// per configuration the mean over the measured steps (the first left out)
// and over ranks, beside two floors measured in the same run:
//   - compute-only: W example trainers with --compute_only at once, no
//     daemon: each rank's batch, forward, backward, clipping and AdamW over
//     all the parameters (client/reference_trainer.h); its step is the
//     slowest rank's median (the ranks do not run in step);
//   - torch: /usr/bin/python3 bench/torch_step.py --rows=ddp --model=step
//     (one thread per process, and glibc malloc settings that keep torch's
//     temporaries mapped: torch_step.py's MALLOC_ENV): torch DDP (gloo, W
//     processes, OpenBLAS) on this model and batch with torch.optim.AdamW
//     and clip_grad_norm_, and torch's compute-only floor (W processes, no
//     communication), each from fresh processes.
// Figures: exposed_comm_ms_<row> = step - the floor of the row's own
// trainer (the example trainer's for shardd rows, torch's for ddp), and
// exposed_comm_ratio_<row>_to_ddp (null when DDP exposes nothing).
// --python=PATH picks the interpreter; --python= (empty) leaves the torch
// rows out.
//
// --quick: F = 1 and F = 4 only, 1 warm-up step and 4 measured steps (4
// more each with --reshard_after_forward and --daemon_prefetch), 200
// latency calls and 5 fresh
// gathers (the model is the same); compute-only 2 + 4 steps, torch 1 + 3
// steps per row. --gather_only: only the Gather
// measurements, on a FULL_SHARD cluster that registers the model without
// training (for profiling the control path); --gather_calls=N: N latency
// calls instead.
//
// Every child gets SIGKILL if this process dies (Subprocess sets
// PR_SET_PDEATHSIG) and when its Subprocess object is destroyed, so no
// child outlives any exit path; daemons are first asked to stop with
// SIGTERM so that they free their shared memory.
//
// Run from the repository root (scripts/bench step [--quick]); the binaries
// are taken from bazel-bin/ (--bin_dir=DIR to change).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "bench/step_profile.h"
#include "client/example_model.h"
#include "client/trainer_client.h"
#include "daemon/core/mono_time.h"
#include "daemon/testing/subprocess.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::bench {
namespace {

using client::TrainerClient;
using tests::Subprocess;

constexpr int kWorld = 4;
constexpr int kLayers = 4;
constexpr int64_t kWidth = 2048;
constexpr int64_t kBatchPerRank = 64;
constexpr int kMaxGathered = 2;  // K
constexpr double kLr = 1e-2;
constexpr double kMaxGradNorm = 1.0;
constexpr uint64_t kSeed = 1;

struct Options {
  bool quick = false;
  // Only the Gather control-path and bandwidth part, on a FULL_SHARD
  // cluster that registers the model without training (profiling).
  bool gather_only = false;
  int gather_calls = 0;  // 0: 200 with --quick, else 1000.
  std::string out;
  std::string bin_dir = "bazel-bin";
  // The torch DDP and compute-only rows: this interpreter runs this script
  // (--rows=ddp --model=step); "" skips them.
  std::string python = "/usr/bin/python3";
  std::string torch_step = "bench/torch_step.py";
};

struct Config {
  std::string name;  // FULL_SHARD, ...
  int f = 1;
  // "" none, "sync" or "async" (--async_checkpoints): every daemon writes a
  // checkpoint of every step into the cluster's directory (on the disk of
  // /tmp, fsynced).
  std::string checkpoints = "";
};

struct ConfigResult {
  Config config;
  // The example trainers' variant: "default", "reshard_fwd"
  // (--reshard_after_forward) or "daemon_prefetch" (--daemon_prefetch).
  std::string trainer = "default";
  double step_ms_median = 0;
  double step_ms_min = 0;
  int64_t bytes_sent_per_step = 0;  // Largest over the ranks.
  int64_t planned_peak_param = 0;
  int64_t formula = 0;
  int64_t planned_total = 0;
  // Rank 0's collective calls per step.
  double all_gathers = 0, reduce_scatters = 0, all_reduces = 0;
  double ag_mb = 0, rs_mb = 0, ar_mb = 0;  // Rank 0's MB sent per step.
  // Where a step's time goes (example_trainer --profile, ms): per rank the
  // mean over the measured steps but the first, then the mean over ranks;
  // total_ms = compute_ms + gather_ms + reduce_grad_ms + step_call_ms +
  // other_ms (release_ms is part of other_ms).
  KeyValues breakdown;
  // With checkpoints: the share of the checkpoints due on rank 0 that were
  // skipped (async: the previous one was still being written).
  double checkpoints_skipped_share = 0;
};

// A trainer run: rank 0's "step N" line times, and every rank's profile
// records ("profile step=N ..." lines).
struct TrainRun {
  std::vector<MonoTime> times;
  std::vector<std::vector<KeyValues>> profiles;
};

// Reads `trainer`'s stdout to its end: "profile ..." lines into `profile`;
// with `times`, the arrival time of each "step N" line (an aborted step
// fails).
absl::Status ReadTrainer(Subprocess& trainer, absl::Time deadline,
                         const std::string& name,
                         std::vector<KeyValues>& profile,
                         std::vector<MonoTime>* times) {
  for (;;) {
    absl::StatusOr<std::string> line = trainer.ReadLine(deadline);
    if (absl::IsOutOfRange(line.status())) return absl::OkStatus();
    if (!line.ok()) return line.status();
    if (std::optional<KeyValues> kv = ParseKeyValues(*line, "profile")) {
      profile.push_back(*std::move(kv));
    } else if (times != nullptr && absl::StartsWith(*line, "step ")) {
      if (absl::StrContains(*line, "aborted")) {
        return absl::AbortedError(absl::StrCat(name, ": ", *line));
      }
      times->push_back(MonoNow());
    }
  }
}

struct GatherResult {
  double rpc_p50_us = 0;
  double rpc_p99_us = 0;
  // The bare-RPC floor over the same socket, interleaved with the Gathers.
  double floor_p50_us = 0;
  double floor_p99_us = 0;
  // Over both kinds of calls of that loop, per call: CPU time of rank 0's
  // daemon, CPU time and time slices (~ wake-ups) of this process.
  double daemon_cpu_us = 0;
  double client_cpu_us = 0, client_slices = 0;
  int rpc_calls = 0;
  double gather_gbps = 0;
  double memcpy_gbps = 0;
  int64_t unit_bytes = 0;
  int fresh_gathers = 0;
  int64_t allgathers_run = 0;  // Rank 0's counter over the fresh loop.
};

// CPU time and time slices (runs on a CPU, ~ wake-ups) of the live
// threads of a process, from /proc/PID/task/*/schedstat (ns on the CPU, ns
// waiting, slices). Threads that exit take their share with them: used for
// this process, whose threads live as long as the measurement.
struct SchedStat {
  double cpu_ns = 0;
  double slices = 0;
};

SchedStat ReadSchedStat(pid_t pid) {
  SchedStat total;
  std::error_code error;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(dir, error)) {
    std::ifstream in(task.path() / "schedstat");
    double cpu = 0, wait = 0, slices = 0;
    if (in >> cpu >> wait >> slices) {  // A thread may have exited.
      total.cpu_ns += cpu;
      total.slices += slices;
    }
  }
  return total;
}

// CPU time (user + system, exited threads included) of a process in
// microseconds, from /proc/PID/stat (clock ticks: coarse, 10 ms here).
double ProcessCpuUs(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3,
  // utime 14, stime 15.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::vector<std::string> fields =
      absl::StrSplit(text.substr(paren + 2), ' ', absl::SkipEmpty());
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return 0;
  }
  return (utime + stime) * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Starts `binary` with `args`, its stderr appended to `log` (stdout is read
// through the Subprocess pipe).
absl::StatusOr<std::unique_ptr<Subprocess>> Start(
    const std::string& binary, const std::vector<std::string>& args,
    const std::string& log, const std::string& name) {
  std::vector<std::string> argv = {
      "/bin/sh", "-c", absl::StrCat("exec \"$0\" \"$@\" 2>>'", log, "'"),
      binary};
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Spawn(std::move(argv), name);
}

std::string WidthsFlag() {
  std::string widths = absl::StrCat(kWidth);
  for (int l = 0; l < kLayers; ++l) absl::StrAppend(&widths, ",", kWidth);
  return absl::StrCat("--widths=", widths);
}

absl::StatusOr<client::ExampleModel> Model(const Config& config) {
  client::ExampleModelOptions options;
  options.widths.assign(kLayers + 1, kWidth);
  options.init_seed = kSeed;
  options.strategy =
      config.name == "FULL_SHARD"     ? v1::SHARDING_STRATEGY_FULL_SHARD
      : config.name == "HYBRID_SHARD" ? v1::SHARDING_STRATEGY_HYBRID_SHARD
                                      : v1::SHARDING_STRATEGY_NO_SHARD;
  options.sharding_factor = config.f;
  options.adamw.lr = kLr;
  options.adamw.weight_decay = 0.0;
  options.max_grad_norm = kMaxGradNorm;
  options.max_gathered_units = kMaxGathered;
  return client::ExampleModel::Create(options);
}

// A coordinator and W daemons in a fresh directory. Destruction stops them
// (SIGTERM, then SIGKILL through Subprocess) and removes the directory.
class Cluster {
 public:
  ~Cluster() { Stop(); }

  absl::Status Start(const Options& options, const Config& config) {
    config_ = config;
    bin_ = options.bin_dir;
    char dir_template[] = "/tmp/shardd-step.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      return absl::InternalError("mkdtemp failed");
    }
    dir_ = dir_template;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<Subprocess>> coordinator = bench::Start(
        bin_ + "/daemon/coordinator/coordinator",
        {"--listen=127.0.0.1:0", absl::StrCat("--world_size=", kWorld),
         absl::StrCat("--sharding_factor=", config.f)},
        dir_ + "/coordinator.log", "coordinator");
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = std::move(*coordinator);
    absl::StatusOr<std::string> line =
        coordinator_->WaitForLine("listening on", deadline);
    if (!line.ok()) return line.status();
    // "coordinator listening on 127.0.0.1:PORT (...)"
    std::vector<std::string> words = absl::StrSplit(*line, ' ');
    if (words.size() < 4) return absl::InternalError(*line);
    const std::string address = words[3];
    for (int r = 0; r < kWorld; ++r) {
      std::vector<std::string> flags = {
          absl::StrCat("--coordinator=", address),
          absl::StrCat("--identity=node-", r),
          absl::StrCat("--rank=", r),
          absl::StrCat("--listen_unix=", Socket(r)),
          absl::StrCat("--shm_dir=", dir_),
          "--device=cpu"};
      if (!config.checkpoints.empty()) {
        flags.push_back(absl::StrCat("--checkpoint_dir=", dir_, "/ckpt"));
        flags.push_back("--checkpoint_interval_steps=1");
        if (config.checkpoints == "async") {
          flags.push_back("--async_checkpoints");
        }
      }
      absl::StatusOr<std::unique_ptr<Subprocess>> daemon =
          bench::Start(bin_ + "/daemon/node/shardd", flags, DaemonLog(r),
                       absl::StrCat("shardd-", r));
      if (!daemon.ok()) return daemon.status();
      daemons_.push_back(std::move(*daemon));
    }
    for (auto& daemon : daemons_) {
      absl::StatusOr<std::string> up =
          daemon->WaitForLine("listening on", deadline);
      if (!up.ok()) return up.status();
    }
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<std::unique_ptr<TrainerClient>> c =
          TrainerClient::Create({.target = Socket(r)});
      if (!c.ok()) return c.status();
      clients_.push_back(std::move(*c));
    }
    return absl::OkStatus();
  }

  std::string Socket(int r) const {
    return absl::StrCat(dir_, "/shardd-", r, ".sock");
  }
  std::string DaemonLog(int r) const {
    return absl::StrCat(dir_, "/shardd-", r, ".log");
  }
  TrainerClient& client(int r) { return *clients_[r]; }
  pid_t daemon_pid(int r) const { return daemons_[r]->pid(); }

  // Runs W example trainers until committed step `steps`; returns the times
  // at which rank 0 printed each "step N" line.
  // `trainer` (see ConfigResult): with reshard_fwd the trainers release
  // each unit after its forward with reshard, so backward gathers every
  // unit again; with daemon_prefetch they gather synchronously with the
  // next unit as the daemon's prefetch hint.
  absl::StatusOr<TrainRun> Train(int64_t steps, const std::string& trainer) {
    std::vector<std::unique_ptr<Subprocess>> trainers;
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<std::unique_ptr<Subprocess>> t = bench::Start(
          bin_ + "/client/example_trainer",
          {absl::StrCat("--socket=", Socket(r)),
           absl::StrCat("--world_size=", kWorld), absl::StrCat("--rank=", r),
           WidthsFlag(), absl::StrCat("--batch_per_rank=", kBatchPerRank),
           absl::StrCat("--steps=", steps),
           absl::StrCat("--strategy=", config_.name),
           absl::StrCat("--sharding_factor=", config_.f),
           absl::StrCat("--lr=", kLr), "--weight_decay=0",
           absl::StrCat("--max_grad_norm=", kMaxGradNorm),
           absl::StrCat("--max_gathered_units=", kMaxGathered),
           absl::StrCat("--reshard_after_forward=",
                        trainer == "reshard_fwd" ? "true" : "false"),
           absl::StrCat("--daemon_prefetch=",
                        trainer == "daemon_prefetch" ? "true" : "false"),
           absl::StrCat("--seed=", kSeed), "--profile"},
          absl::StrCat(dir_, "/trainer-", r, ".log"),
          absl::StrCat("trainer-", r));
      if (!t.ok()) return t.status();
      trainers.push_back(std::move(*t));
    }
    const absl::Time deadline = absl::Now() + absl::Minutes(10);
    TrainRun run;
    run.profiles.resize(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      if (absl::Status s =
              ReadTrainer(*trainers[r], deadline, absl::StrCat("trainer-", r),
                          run.profiles[r], r == 0 ? &run.times : nullptr);
          !s.ok()) {
        return s;
      }
    }
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<int> code = trainers[r]->Wait(deadline);
      if (!code.ok()) return code.status();
      if (*code != 0) {
        return absl::InternalError(absl::StrCat("trainer-", r, " exited with ",
                                                *code, " (log in ", dir_, ")"));
      }
    }
    return run;
  }

  // bytes_sent over all collectives, per rank, and rank 0's calls per kind.
  struct Counters {
    std::vector<int64_t> sent;
    int64_t calls[6] = {0, 0, 0, 0, 0, 0};  // By v1::CollectiveKind.
    int64_t sent0[6] = {0, 0, 0, 0, 0, 0};  // Rank 0's bytes_sent by kind.
  };
  absl::StatusOr<Counters> ReadCounters() {
    Counters counters;
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<v1::GetStatusResponse> s = clients_[r]->GetStatus();
      if (!s.ok()) return s.status();
      int64_t total = 0;
      for (const v1::CollectiveStats& c : s->collectives()) {
        total += c.bytes_sent();
        if (r == 0 && c.kind() >= 0 && c.kind() < 6) {
          counters.calls[c.kind()] += c.calls();
          counters.sent0[c.kind()] += c.bytes_sent();
        }
      }
      counters.sent.push_back(total);
    }
    return counters;
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
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
      dir_.clear();
    }
  }

 private:
  Config config_;
  std::string bin_;
  std::string dir_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> daemons_;
  std::vector<std::unique_ptr<TrainerClient>> clients_;
};

absl::StatusOr<int64_t> AllGatherCalls(TrainerClient& client) {
  absl::StatusOr<v1::GetStatusResponse> s = client.GetStatus();
  if (!s.ok()) return s.status();
  int64_t calls = 0;
  for (const v1::CollectiveStats& c : s->collectives()) {
    if (c.kind() == v1::COLLECTIVE_KIND_ALL_GATHER) calls += c.calls();
  }
  return calls;
}

absl::StatusOr<GatherResult> MeasureGather(Cluster& cluster,
                                           const Config& config, int calls,
                                           int fresh) {
  absl::StatusOr<client::ExampleModel> model = Model(config);
  if (!model.ok()) return model.status();
  const v1::RegisterModelRequest request = model->RegisterRequest();
  std::vector<absl::Status> statuses(kWorld);
  std::vector<std::vector<double>> rpc_us(kWorld), fresh_s(kWorld);
  std::vector<double> floor_us;  // Rank 0's Release of an ungathered unit.
  absl::Notification measured;   // Rank 0's latency loop is over.
  double daemon_cpu_us = 0;
  double client_cpu_us = 0, client_slices = 0;
  int64_t ag_before = 0, ag_after = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      // Rank 0 lets the others go on however it leaves.
      absl::Cleanup release_others = [&] {
        if (r == 0 && !measured.HasBeenNotified()) measured.Notify();
      };
      TrainerClient& c = cluster.client(r);
      auto deadline = [] { return MonoNow() + absl::Seconds(60); };
      absl::StatusOr<v1::RegisterModelResponse> reg =
          c.RegisterModel(request, MonoNow() + absl::Minutes(2));
      if (!reg.ok()) {
        statuses[r] = reg.status();
        return;
      }
      // Control path: unit 0 gathered once, then gathered again (cached).
      absl::StatusOr<client::GatheredUnit> g =
          c.Gather(0, v1::PASS_FORWARD, {}, deadline());
      if (!g.ok()) {
        statuses[r] = g.status();
        return;
      }
      // Only rank 0 measures (the others would compete for the 2 cores);
      // the others wait on `measured`, not inside a gRPC call: a thread
      // blocked in a call of this process can become the process's gRPC
      // poller and hand rank 0's replies over to it (a wake-up more per
      // call, which a trainer with one client does not pay).
      // Each cached Gather is followed by the floor: Release of a unit that
      // is not gathered (the daemon looks it up and answers
      // was_gathered = false), so both see the same moment of the box.
      const double daemon0 = ProcessCpuUs(cluster.daemon_pid(0));
      const SchedStat client0 = ReadSchedStat(getpid());
      for (int i = 0; r == 0 && i < calls; ++i) {
        const MonoTime t0 = MonoNow();
        g = c.Gather(0, v1::PASS_FORWARD, {}, deadline());
        const MonoTime t1 = MonoNow();
        if (!g.ok()) {
          statuses[r] = g.status();
          return;
        }
        absl::StatusOr<v1::ReleaseResponse> floor =
            c.Release(kLayers - 1, v1::PASS_FORWARD, deadline());
        const MonoTime t2 = MonoNow();
        if (!floor.ok()) {
          statuses[r] = floor.status();
          return;
        }
        if (floor->was_gathered()) {
          statuses[r] = absl::InternalError(
              "the floor's Release found its unit gathered");
          return;
        }
        rpc_us[r].push_back(absl::ToDoubleMicroseconds(t1 - t0));
        floor_us.push_back(absl::ToDoubleMicroseconds(t2 - t1));
      }
      if (r == 0) {
        const double daemon1 = ProcessCpuUs(cluster.daemon_pid(0));
        const SchedStat client1 = ReadSchedStat(getpid());
        const double n = 2.0 * calls;
        daemon_cpu_us = (daemon1 - daemon0) / n;
        client_cpu_us = (client1.cpu_ns - client0.cpu_ns) / 1e3 / n;
        client_slices = (client1.slices - client0.slices) / n;
      }
      if (r == 0) {
        std::move(release_others).Invoke();
      } else if (!measured.WaitForNotificationWithTimeout(absl::Minutes(5))) {
        statuses[r] = absl::DeadlineExceededError(
            "rank 0 did not finish its latency loop in 5 minutes");
        return;
      }
      if (auto rel = c.Release(0, v1::PASS_FORWARD); !rel.ok()) {
        statuses[r] = rel.status();
        return;
      }
      // Data path: fresh AllGathers, cycling through the units so that no
      // gathered buffer can be reused (the first one also lines the ranks
      // up; it is not counted). The AllGather counter of rank 0 checks that
      // each call ran a collective.
      if (r == 0) {
        absl::StatusOr<int64_t> before = AllGatherCalls(c);
        if (!before.ok()) {
          statuses[r] = before.status();
          return;
        }
        ag_before = *before;
      }
      for (int i = 0; i <= fresh; ++i) {
        const int unit = (i + 1) % kLayers;
        const MonoTime t0 = MonoNow();
        g = c.Gather(unit, v1::PASS_FORWARD, {}, deadline());
        const MonoTime t1 = MonoNow();
        if (!g.ok()) {
          statuses[r] = g.status();
          return;
        }
        if (i > 0) fresh_s[r].push_back(absl::ToDoubleSeconds(t1 - t0));
        if (auto rel = c.Release(unit, v1::PASS_FORWARD); !rel.ok()) {
          statuses[r] = rel.status();
          return;
        }
      }
      if (r == 0) {
        absl::StatusOr<int64_t> after = AllGatherCalls(c);
        if (!after.ok()) {
          statuses[r] = after.status();
          return;
        }
        ag_after = *after;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(
          statuses[r].code(),
          absl::StrCat("rank ", r, ": ", statuses[r].message()));
    }
  }
  GatherResult result;
  result.rpc_calls = calls;
  result.rpc_p50_us = Percentile(rpc_us[0], 0.5);
  result.rpc_p99_us = Percentile(rpc_us[0], 0.99);
  result.floor_p50_us = Percentile(floor_us, 0.5);
  result.floor_p99_us = Percentile(floor_us, 0.99);
  result.daemon_cpu_us = daemon_cpu_us;
  result.client_cpu_us = client_cpu_us;
  result.client_slices = client_slices;
  result.fresh_gathers = fresh;
  result.allgathers_run = ag_after - ag_before;
  result.unit_bytes = (kWidth * kWidth + kWidth) * 4;
  result.gather_gbps =
      static_cast<double>(result.unit_bytes) / Median(fresh_s[0]) / 1e9;

  // memcpy of the same bytes, pre-faulted buffers.
  std::vector<char> src(result.unit_bytes, 1), dst(result.unit_bytes, 0);
  std::vector<double> copy_s;
  for (int i = 0; i < 20; ++i) {
    const MonoTime t0 = MonoNow();
    std::memcpy(dst.data(), src.data(), src.size());
    const MonoTime t1 = MonoNow();
    copy_s.push_back(absl::ToDoubleSeconds(t1 - t0));
    src[i] = dst[src.size() - 1 - i];  // Keep the copies observable.
  }
  result.memcpy_gbps =
      static_cast<double>(result.unit_bytes) / Median(copy_s) / 1e9;
  return result;
}

int GatherCalls(const Options& options) {
  if (options.gather_calls > 0) return options.gather_calls;
  return options.quick ? 200 : 1000;
}

// Trains until committed step `until` (the last `measured` steps measured)
// and fills `result`'s step time, bytes and collective calls.
absl::Status MeasureSteps(Cluster& cluster, int64_t until, int measured,
                          ConfigResult& result) {
  absl::StatusOr<Cluster::Counters> before = cluster.ReadCounters();
  if (!before.ok()) return before.status();
  absl::StatusOr<TrainRun> run = cluster.Train(until, result.trainer);
  if (!run.ok()) return run.status();
  const std::vector<MonoTime>* times = &run->times;
  // The first measured step follows the trainers' start (as the step time,
  // which is taken between step lines): left out.
  absl::StatusOr<KeyValues> breakdown =
      MeanOverRanks(run->profiles, until - measured + 1);
  if (!breakdown.ok()) return breakdown.status();
  result.breakdown = *std::move(breakdown);
  absl::StatusOr<Cluster::Counters> after = cluster.ReadCounters();
  if (!after.ok()) return after.status();
  if (static_cast<int>(times->size()) != measured) {
    return absl::InternalError(absl::StrCat("rank 0 printed ", times->size(),
                                            " steps, expected ", measured));
  }
  std::vector<double> ms;
  for (size_t i = 1; i < times->size(); ++i) {
    ms.push_back(absl::ToDoubleMilliseconds((*times)[i] - (*times)[i - 1]));
  }
  result.step_ms_median = Median(ms);
  result.step_ms_min = *std::min_element(ms.begin(), ms.end());
  for (int r = 0; r < kWorld; ++r) {
    result.bytes_sent_per_step =
        std::max(result.bytes_sent_per_step,
                 (after->sent[r] - before->sent[r]) / measured);
  }
  auto per_step = [&](v1::CollectiveKind kind) {
    return static_cast<double>(after->calls[kind] - before->calls[kind]) /
           measured;
  };
  auto mb_per_step = [&](v1::CollectiveKind kind) {
    return static_cast<double>(after->sent0[kind] - before->sent0[kind]) /
           measured / 1e6;
  };
  result.ag_mb = mb_per_step(v1::COLLECTIVE_KIND_ALL_GATHER);
  result.rs_mb = mb_per_step(v1::COLLECTIVE_KIND_REDUCE_SCATTER);
  result.ar_mb = mb_per_step(v1::COLLECTIVE_KIND_ALL_REDUCE);
  result.all_gathers = per_step(v1::COLLECTIVE_KIND_ALL_GATHER);
  result.reduce_scatters = per_step(v1::COLLECTIVE_KIND_REDUCE_SCATTER);
  result.all_reduces = per_step(v1::COLLECTIVE_KIND_ALL_REDUCE);
  return absl::OkStatus();
}

// One cluster per configuration: warm-up steps, then the measured steps
// with the default trainer; FULL_SHARD measures as many steps again with
// --reshard_after_forward and with --daemon_prefetch (two more results) and
// then the Gather latency
// and bandwidth.
absl::StatusOr<std::vector<ConfigResult>> RunConfig(
    const Options& options, const Config& config,
    std::optional<GatherResult>* gather) {
  const int warmup = options.quick ? 1 : 2;
  const int measured = options.quick ? 4 : 10;
  // The FULL_SHARD cluster without checkpoints also runs the other trainers.
  const bool full = config.f == kWorld && config.checkpoints.empty();
  Cluster cluster;
  if (absl::Status s = cluster.Start(options, config); !s.ok()) return s;
  std::cerr << "step: " << config.name << " F=" << config.f
            << (config.checkpoints.empty()
                    ? ""
                    : absl::StrCat(" checkpoints=", config.checkpoints))
            << ": " << warmup << " warm-up + " << measured << " measured steps"
            << (full ? absl::StrCat(" + ", measured,
                                    " each with --reshard_after_forward and "
                                    "--daemon_prefetch")
                     : "")
            << "\n";
  absl::StatusOr<TrainRun> warm = cluster.Train(warmup, "default");
  if (!warm.ok()) return warm.status();

  std::vector<ConfigResult> results(full ? 3 : 1);
  results[0].config = config;
  if (absl::Status s =
          MeasureSteps(cluster, warmup + measured, measured, results[0]);
      !s.ok()) {
    return s;
  }
  if (full) {
    for (int i : {1, 2}) {
      results[i].config = config;
      results[i].trainer = i == 1 ? "reshard_fwd" : "daemon_prefetch";
      if (absl::Status s = MeasureSteps(cluster, warmup + (i + 1) * measured,
                                        measured, results[i]);
          !s.ok()) {
        return s;
      }
    }
  }

  absl::StatusOr<v1::GetStatusResponse> status = cluster.client(0).GetStatus();
  if (!status.ok()) return status.status();
  int64_t sum = 0, max = 0;
  for (const v1::UnitMemory& u : status->memory().units()) {
    sum += u.numel() * 4;
    max = std::max<int64_t>(max, u.numel() * 4);
  }
  for (ConfigResult& result : results) {
    result.formula = sum / config.f + kMaxGathered * max;
    result.planned_peak_param =
        status->memory().planned().peak_parameter_bytes();
    result.planned_total = status->memory().planned().total_bytes();
  }
  if (!config.checkpoints.empty()) {
    // One checkpoint was due per committed step.
    std::ifstream log(cluster.DaemonLog(0));
    int skipped = 0;
    for (std::string line; std::getline(log, line);) {
      if (absl::StrContains(line, "skipped: UNAVAILABLE")) ++skipped;
    }
    results[0].checkpoints_skipped_share =
        static_cast<double>(skipped) / (warmup + measured);
  }

  if (gather != nullptr) {
    absl::StatusOr<GatherResult> g = MeasureGather(
        cluster, config, GatherCalls(options), options.quick ? 5 : 20);
    if (!g.ok()) return g.status();
    *gather = *g;
  }
  return results;
}

// The compute-only floor: W example trainers with --compute_only (no
// daemon: this rank's batch, forward, backward, clipping and AdamW over all
// the parameters) at once, as many steps as a configuration's warm-up and
// measured ones.
struct ComputeOnlyResult {
  double step_ms = 0;  // The slowest rank's median (they run unsynchronised).
  KeyValues breakdown;
};

absl::StatusOr<ComputeOnlyResult> RunComputeOnly(const Options& options,
                                                 int warmup, int measured) {
  char dir_template[] = "/tmp/shardd-step-compute.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError("mkdtemp failed");
  }
  const std::string dir = dir_template;
  absl::Cleanup remove_dir = [&] {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  };
  std::cerr << "step: compute-only: " << kWorld
            << " example trainers without a daemon, " << warmup << " warm-up + "
            << measured << " measured steps\n";
  std::vector<std::unique_ptr<Subprocess>> trainers;
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<std::unique_ptr<Subprocess>> t = bench::Start(
        options.bin_dir + "/client/example_trainer",
        {"--compute_only", "--profile", WidthsFlag(),
         absl::StrCat("--batch_per_rank=", kBatchPerRank),
         absl::StrCat("--steps=", warmup + measured),
         absl::StrCat("--lr=", kLr), "--weight_decay=0",
         absl::StrCat("--max_grad_norm=", kMaxGradNorm),
         absl::StrCat("--seed=", kSeed)},
        absl::StrCat(dir, "/trainer-", r, ".log"), absl::StrCat("compute-", r));
    if (!t.ok()) return t.status();
    trainers.push_back(std::move(*t));
  }
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  std::vector<std::vector<KeyValues>> profiles(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    if (absl::Status s =
            ReadTrainer(*trainers[r], deadline, absl::StrCat("compute-", r),
                        profiles[r], nullptr);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<int> code = trainers[r]->Wait(deadline);
    if (!code.ok()) return code.status();
    if (*code != 0) {
      std::ifstream log(absl::StrCat(dir, "/trainer-", r, ".log"));
      std::string text((std::istreambuf_iterator<char>(log)),
                       std::istreambuf_iterator<char>());
      return absl::InternalError(absl::StrCat(
          "compute-only trainer ", r, " exited with ", *code, ": ", text));
    }
  }
  ComputeOnlyResult result;
  absl::StatusOr<double> step_ms =
      SlowestRankMedian(profiles, warmup, "total_ms");
  if (!step_ms.ok()) return step_ms.status();
  result.step_ms = *step_ms;
  absl::StatusOr<KeyValues> breakdown = MeanOverRanks(profiles, warmup);
  if (!breakdown.ok()) return breakdown.status();
  result.breakdown = *std::move(breakdown);
  return result;
}

// torch DDP (gloo, W processes, OpenBLAS, one thread each) on this bench's
// model and batch, and torch's compute-only floor (the same processes
// before DDP: the same model, batch, clipping and AdamW, no
// communication), run by bench/torch_step.py --rows=ddp --model=step: by
// row ("ddp", "compute") its torch_row figures (step_ms: the median of
// the slowest rank per step, compute-only: the slowest rank's median;
// rank_step_ms, fwd_ms, bwd_ms, opt_ms: per rank means, then over ranks).
absl::StatusOr<std::map<std::string, KeyValues>> RunTorch(
    const Options& options, int warmup, int measured) {
  if (access(options.python.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat(options.python, " is not there (scripts/install-deps)"));
  }
  std::cerr << "step: torch DDP and compute-only rows: " << options.python
            << " " << options.torch_step
            << " --rows=ddp --model=step, OMP_NUM_THREADS=1\n";
  char log_template[] = "/tmp/shardd-step-torch.XXXXXX";
  const int fd = mkstemp(log_template);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  close(fd);
  const std::string log = log_template;
  absl::Cleanup remove_log = [&] { std::remove(log.c_str()); };
  absl::StatusOr<std::unique_ptr<Subprocess>> torch = bench::Start(
      "/usr/bin/env",
      {"OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", options.python,
       options.torch_step, "--rows=ddp", "--model=step", "--rounds=1",
       absl::StrCat("--warmup=", warmup), absl::StrCat("--steps=", measured),
       "--machine_lines"},
      log, "torch_step");
  if (!torch.ok()) return torch.status();
  const absl::Time deadline = absl::Now() + absl::Minutes(8);
  std::map<std::string, KeyValues> rows;
  for (;;) {
    absl::StatusOr<std::string> line = (*torch)->ReadLine(deadline);
    if (absl::IsOutOfRange(line.status())) break;
    if (!line.ok()) return line.status();
    if (absl::StartsWith(*line, "  round ")) {
      std::cerr << "step: torch:" << line->substr(1) << "\n";
    }
    for (const char* name : {"ddp", "compute"}) {
      if (std::optional<KeyValues> kv =
              ParseKeyValues(*line, absl::StrCat("torch_row name=", name))) {
        rows[name] = *std::move(kv);
      }
    }
  }
  absl::StatusOr<int> code = (*torch)->Wait(deadline);
  if (!code.ok()) return code.status();
  if (*code != 0 || rows.size() != 2) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    return absl::InternalError(
        absl::StrCat(options.torch_step, " exited with ", *code, " and ",
                     rows.size(), " of 2 rows: ",
                     text.substr(text.size() > 2000 ? text.size() - 2000 : 0)));
  }
  return rows;
}

int WriteReport(const Options& options, const BenchReport& report,
                bool print = true) {
  if (print) std::cout << report.Table();
  std::cout << std::flush;
  if (!options.out.empty()) {
    if (absl::Status status = report.WriteJson(options.out); !status.ok()) {
      std::cerr << "step: " << status << "\n";
      return 1;
    }
  }
  return 0;
}

void AddGatherRows(const GatherResult& gather, BenchReport& report) {
  report.AddRow({{"what", std::string("gather_rpc_cached")},
                 {"strategy", std::string("FULL_SHARD")},
                 {"F", static_cast<double>(kWorld)},
                 {"calls", static_cast<double>(gather.rpc_calls)},
                 {"p50_us", gather.rpc_p50_us},
                 {"p99_us", gather.rpc_p99_us}});
  report.AddRow({{"what", std::string("release_rpc_floor")},
                 {"strategy", std::string("FULL_SHARD")},
                 {"F", static_cast<double>(kWorld)},
                 {"calls", static_cast<double>(gather.rpc_calls)},
                 {"p50_us", gather.floor_p50_us},
                 {"p99_us", gather.floor_p99_us}});
  report.AddRow({{"what", std::string("rpc_cost_per_call")},
                 {"strategy", std::string("FULL_SHARD")},
                 {"F", static_cast<double>(kWorld)},
                 {"calls", static_cast<double>(2 * gather.rpc_calls)},
                 {"daemon_cpu_us", gather.daemon_cpu_us},
                 {"client_cpu_us", gather.client_cpu_us},
                 {"client_slices", gather.client_slices}});
  report.AddRow({{"what", std::string("gather_fresh_vs_memcpy")},
                 {"strategy", std::string("FULL_SHARD")},
                 {"F", static_cast<double>(kWorld)},
                 {"calls", static_cast<double>(gather.fresh_gathers)},
                 {"allgathers_run", static_cast<double>(gather.allgathers_run)},
                 {"unit_MB", gather.unit_bytes / 1e6},
                 {"gather_GBps", gather.gather_gbps},
                 {"memcpy_GBps", gather.memcpy_gbps}});
  report.SetFigure("gather_rpc_p50_us", gather.rpc_p50_us);
  report.SetFigure("gather_rpc_p99_us", gather.rpc_p99_us);
  report.SetFigure("rpc_floor_p50_us", gather.floor_p50_us);
  report.SetFigure("gather_bw_to_memcpy_ratio",
                   gather.gather_gbps / gather.memcpy_gbps);
}

// --gather_only: a FULL_SHARD cluster, no training, only MeasureGather.
int RunGatherOnly(const Options& options) {
  const Config config{"FULL_SHARD", kWorld};
  Cluster cluster;
  absl::StatusOr<GatherResult> gather = absl::UnknownError("not run");
  if (absl::Status s = cluster.Start(options, config); !s.ok()) {
    gather = s;
  } else {
    gather = MeasureGather(cluster, config, GatherCalls(options),
                           options.quick ? 5 : 20);
  }
  if (!gather.ok()) {
    std::cerr << "step: gather_only: " << gather.status() << "\n";
    return 1;
  }
  BenchReport report("step");
  AddGatherRows(*gather, report);
  return WriteReport(options, report);
}

int Run(const Options& options) {
  if (options.gather_only) return RunGatherOnly(options);
  std::vector<Config> configs = {{"NO_SHARD", 1}};
  if (!options.quick) configs.push_back({"HYBRID_SHARD", 2});
  configs.push_back({"FULL_SHARD", kWorld});
  configs.push_back({"FULL_SHARD", kWorld, "sync"});
  configs.push_back({"FULL_SHARD", kWorld, "async"});

  BenchReport report("step");
  std::optional<GatherResult> gather;
  std::vector<ConfigResult> results;
  for (const Config& config : configs) {
    absl::StatusOr<std::vector<ConfigResult>> rs = RunConfig(
        options, config,
        config.f == kWorld && config.checkpoints.empty() ? &gather : nullptr);
    if (!rs.ok()) {
      std::cerr << "step: " << config.name << ": " << rs.status() << "\n";
      return 1;
    }
    for (const ConfigResult& r : *rs) {
      results.push_back(r);
      report.AddRow(
          {{"what", std::string("step")},
           {"strategy", config.name},
           {"F", static_cast<double>(config.f)},
           {"trainer", r.trainer},
           {"checkpoints",
            config.checkpoints.empty()
                ? std::string("none")
                : absl::StrCat(config.checkpoints, " every step")},
           {"step_ms_median", r.step_ms_median},
           {"step_ms_min", r.step_ms_min},
           {"MB_sent_per_step_rank", r.bytes_sent_per_step / 1e6},
           {"AG_per_step", r.all_gathers},
           {"RS_per_step", r.reduce_scatters},
           {"AR_per_step", r.all_reduces},
           {"AG_MB", r.ag_mb},
           {"RS_MB", r.rs_mb},
           {"AR_MB", r.ar_mb},
           {"peak_param_B", static_cast<double>(r.planned_peak_param)},
           {"formula_B", static_cast<double>(r.formula)},
           {"planned_total_MB", r.planned_total / 1e6}});
    }
  }
  const ConfigResult* full = nullptr;           // The default trainer.
  const ConfigResult* full_reshard = nullptr;   // --reshard_after_forward.
  const ConfigResult* full_prefetch = nullptr;  // --daemon_prefetch.
  const ConfigResult* none = nullptr;
  const ConfigResult* ckpt_sync = nullptr;
  const ConfigResult* ckpt_async = nullptr;
  for (const ConfigResult& r : results) {
    if (!r.config.checkpoints.empty()) {
      (r.config.checkpoints == "sync" ? ckpt_sync : ckpt_async) = &r;
      continue;
    }
    if (r.config.name == "FULL_SHARD") {
      (r.trainer == "reshard_fwd"       ? full_reshard
       : r.trainer == "daemon_prefetch" ? full_prefetch
                                        : full) = &r;
    }
    if (r.config.name == "NO_SHARD") none = &r;
    if (r.config.name == "HYBRID_SHARD") {
      report.SetFigure("step_ms_hybrid_shard_w4", r.step_ms_median);
    }
  }
  auto bytes_ratio = [&](const ConfigResult* r) {
    return static_cast<double>(r->bytes_sent_per_step) /
           static_cast<double>(none->bytes_sent_per_step);
  };
  report.SetFigure("step_ms_full_shard_w4", full->step_ms_median);
  report.SetFigure("step_ms_full_shard_reshard_w4",
                   full_reshard->step_ms_median);
  report.SetFigure("step_ms_full_shard_daemon_prefetch_w4",
                   full_prefetch->step_ms_median);
  report.SetFigure("step_ms_no_shard_w4", none->step_ms_median);
  // Checkpoints of every step, written inside the Step or in the
  // background, against the same cluster without checkpoints.
  report.SetFigure("step_ms_full_shard_ckpt_sync_w4",
                   ckpt_sync->step_ms_median);
  report.SetFigure("step_ms_full_shard_ckpt_async_w4",
                   ckpt_async->step_ms_median);
  report.SetFigure("ckpt_sync_step_ratio_to_no_ckpt",
                   ckpt_sync->step_ms_median / full->step_ms_median);
  report.SetFigure("ckpt_async_step_ratio_to_no_ckpt",
                   ckpt_async->step_ms_median / full->step_ms_median);
  report.SetFigure("ckpt_async_skipped_share",
                   ckpt_async->checkpoints_skipped_share);
  // The algorithm's figure (every unit gathered again for backward) and
  // the default trainer's (the last K units answered from the cache).
  report.SetFigure("bytes_ratio_full_to_noshard", bytes_ratio(full_reshard));
  report.SetFigure("bytes_ratio_full_to_noshard_cached", bytes_ratio(full));
  report.SetFigure(
      "peak_param_bytes_minus_formula",
      static_cast<double>(full->planned_peak_param - full->formula));
  if (gather.has_value()) AddGatherRows(*gather, report);

  // The profile: the compute-only floor of the example trainer, torch DDP
  // and its floor, and where each row's step goes.
  const int warmup = options.quick ? 1 : 2;
  const int measured = options.quick ? 4 : 10;
  // One warm-up step more than the trained rows: the trainers start one by
  // one (each computes the initial values first) and run unsynchronised.
  absl::StatusOr<ComputeOnlyResult> floor =
      RunComputeOnly(options, warmup + 1, measured);
  if (!floor.ok()) {
    std::cerr << "step: compute-only: " << floor.status() << "\n";
    return 1;
  }
  std::optional<std::map<std::string, KeyValues>> torch;
  if (!options.python.empty()) {
    // --quick: 1 + 3 steps per row, to stay near a minute in all.
    absl::StatusOr<std::map<std::string, KeyValues>> t =
        RunTorch(options, options.quick ? 1 : 3, options.quick ? 3 : measured);
    if (!t.ok()) {
      std::cerr << "step: torch rows: " << t.status() << "\n";
      return 1;
    }
    torch = *std::move(t);
  }
  BenchReport breakdown("step breakdown (ms)");
  std::map<std::string, StepAndFloor> exposed_rows;
  const std::vector<std::string> parts = {
      "compute_ms", "gather_ms", "reduce_grad_ms", "step_call_ms", "release_ms",
      "other_ms",   "fwd_ms",    "bwd_ms",         "opt_ms"};
  auto add_breakdown = [&](const std::string& row, const std::string& trainer,
                           double step_ms, std::optional<double> floor_ms,
                           const KeyValues& kv) {
    BenchReport::Row out = {{"what", std::string("breakdown")},
                            {"row", row},
                            {"trainer", trainer},
                            {"step_ms", step_ms}};
    if (floor_ms.has_value()) {
      out.push_back({"exposed_comm_ms", step_ms - *floor_ms});
    }
    auto total = kv.find("total_ms");
    if (total == kv.end()) total = kv.find("rank_step_ms");
    if (total != kv.end()) out.push_back({"rank_step_ms", total->second});
    for (const std::string& part : parts) {
      if (auto it = kv.find(part); it != kv.end()) {
        out.push_back({part, it->second});
      }
    }
    breakdown.AddRow(std::move(out));
  };
  add_breakdown("compute-only", "example_trainer", floor->step_ms, std::nullopt,
                floor->breakdown);
  for (const ConfigResult& r : results) {
    std::string key = absl::AsciiStrToLower(r.config.name);
    if (r.trainer != "default") absl::StrAppend(&key, "_", r.trainer);
    if (!r.config.checkpoints.empty()) {
      absl::StrAppend(&key, "_ckpt_", r.config.checkpoints);
    }
    add_breakdown(key,
                  r.trainer == "default"
                      ? std::string("example_trainer")
                      : absl::StrCat("example_trainer ", r.trainer),
                  r.step_ms_median, floor->step_ms, r.breakdown);
    if (r.trainer == "default" && r.config.checkpoints.empty()) {
      exposed_rows[key] = {r.step_ms_median, floor->step_ms};
    }
  }
  report.SetFigure("compute_only_step_ms", floor->step_ms);
  if (torch.has_value()) {
    const KeyValues& compute = torch->at("compute");
    const KeyValues& ddp = torch->at("ddp");
    add_breakdown("torch compute-only", "torch", compute.at("step_ms"),
                  std::nullopt, compute);
    add_breakdown("ddp", "torch", ddp.at("step_ms"), compute.at("step_ms"),
                  ddp);
    exposed_rows["ddp"] = {ddp.at("step_ms"), compute.at("step_ms")};
    report.SetFigure("torch_ddp_step_ms", ddp.at("step_ms"));
    report.SetFigure("torch_compute_only_step_ms", compute.at("step_ms"));
  }
  for (const auto& [name, value] : ExposedCommFigures(exposed_rows)) {
    report.SetFigure(name, value);
  }
  std::cout << report.Table() << breakdown.Table()
            << "breakdown: per rank the mean over the measured steps (the "
               "first left out), then the mean over ranks; rank_step_ms = "
               "compute + gather + reduce_grad + step_call + other "
               "(release_ms is part of other_ms). exposed_comm_ms = step_ms "
               "- the compute-only step_ms of the same trainer (example "
               "trainer's for shardd rows, torch's for DDP). torch rows: "
               "fwd/bwd/opt (DDP's all-reduce waits are in bwd_ms).\n";
  // The JSON has both tables' rows.
  for (const BenchReport::Row& row : breakdown.rows()) report.AddRow(row);
  return WriteReport(options, report, /*print=*/false);
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
    } else if (absl::StartsWith(arg, "--bin_dir=")) {
      options.bin_dir = arg.substr(10);
    } else if (absl::StartsWith(arg, "--python=")) {
      options.python = arg.substr(9);
    } else if (absl::StartsWith(arg, "--torch_step=")) {
      options.torch_step = arg.substr(13);
    } else if (arg == "--gather_only") {
      options.gather_only = true;
    } else if (absl::StartsWith(arg, "--gather_calls=")) {
      if (!absl::SimpleAtoi(arg.substr(15), &options.gather_calls) ||
          options.gather_calls < 1) {
        std::cerr << "--gather_calls: expected a number >= 1, got '"
                  << arg.substr(15) << "'\n";
        return 2;
      }
    } else {
      std::cerr << "usage: " << argv[0]
                << " [--quick] [--gather_only] [--gather_calls=N] "
                   "[--out=PATH] [--bin_dir=DIR] [--python=PATH (empty: no "
                   "torch rows)] [--torch_step=PATH]\n";
      return 2;
    }
  }
  return shardd::bench::Run(options);
}
