// bench/recovery: time from the SIGKILL of a shardd daemon to training
// resumed, split into phases, for models of about 10M, 50M and 200M
// parameters at W = 4, F = 2 (HYBRID_SHARD); beside it, in the same run, the
// time to restore the same shard from a sharded checkpoint on local disk and
// the loopback bandwidth of raw Gloo for the same byte count.
//
// Models: the example trainer's teacher-student MLP, square layers (ReLU
// between, MSE), fp32, AdamW (lr 1e-4, weight decay 0), clipping at 1.0,
// batch 2 per rank so that steps are short, one FSDP unit per layer:
//   10m  = 10 layers of 1024 x 1024 (+ bias) = 10.5M parameters
//   50m  = 12 layers of 2048 x 2048 (+ bias) = 50.4M
//   200m = 12 layers of 4096 x 4096 (+ bias) = 201.4M
// Rank 1's shard (parameters, AdamW exp_avg and exp_avg_sq; F = 2 so half
// of each unit) is 12 bytes per parameter / 2: 63 MB, 302 MB, 1.21 GB.
//
// How a run goes (per model): a coordinator, 4 shardd daemons (CPU, Unix
// sockets and shared memory in a fresh directory under /dev/shm) and 4
// //client:example_trainer processes, as bench/step starts them. Daemon 1 is
// armed with the fail point allgather.mid:stop@N, N chosen so that it fires
// in the forward pass of step 3 (2 steps committed): the daemon stops itself
// in the middle of a unit's AllGather and says so on stderr; this process
// SIGKILLs it at once (t_kill, taken just before kill(2)) and, as a
// supervisor would, immediately starts its replacement with the same rank,
// identity and socket. Every line the daemons (stdout and stderr) and the
// trainers (stdout) print is read by a thread per process and stamped with
// this process's clock on arrival; the coordinator's decision log (stderr,
// ISO timestamps with milliseconds, the same wall clock) is parsed after
// the run. Phases:
//   detection   t_kill -> the coordinator's first EPOCH_STARTED or
//               MEMBER_REMOVED after the kill (a survivor's failed
//               collective, or the replacement's join, or a lease expiry;
//               the row says which);
//   join_wait   detection -> the replacement's MEMBER_JOINED, when the
//               replacement's start-up was not hidden behind detection
//               (0 otherwise);
//   rendezvous  MEMBER_JOINED -> EPOCH_READY minus the transfer: recovery
//               planning, the new epoch's communicators, the READY reports;
//               the replacement builds its step engine meanwhile (every
//               buffer allocated and pre-faulted; the build time its
//               CopyEngineReady event reports, as its own row);
//   transfer    the replacement's own figure (its "recovered shard ... in
//               T s" line): the FetchShard call, whose header is followed by
//               the shard's bytes over the epoch's replica group (Gloo
//               send/recv straight into the engine) and each piece's CRC-32C
//               checked, then the install;
//   first_step  EPOCH_READY -> the last of the 4 trainers' first "step N"
//               line after the failure (the aborted step redone, committed);
//   total       t_kill -> that same line: training resumed everywhere.
// The coordinator's timestamps are truncated to milliseconds, so phases
// carry about 1 ms of rounding. step_s is the median interval between
// consecutive committed steps outside the failure (for scale: first_step is
// essentially one step).
//
// The transfer row is split at the replacement's CopyEngineReady event
// (Trainer.WatchEvents, sent when the header arrived and its engine exists;
// read after the copy, stamped with the daemon's wall clock in ms):
// "request+header" before it (and the engine's creation, when it was not
// prepared), "data" (and the install) after it, up to the arrival of the
// "recovered shard" line here.
//
// After training, with the cluster still up, this process fetches the same
// shard from rank 3 (rank 1's replica) over Peer.FetchShard itself: once
// into freshly allocated buffers, then 3 times into the same, now
// faulted-in buffers (median): the stream's own speed (gRPC, chunk CRCs,
// copies) without the replacement's engine creation; cpu_ns_per_B is the
// CPU time of this process and of the source daemon (all threads, from
// /proc) per shard byte. The fetched shard is then written as a sharded
// checkpoint (WriteShardCheckpoint, fsynced) to a directory under /tmp
// (local disk), the cluster is stopped (SIGTERM; the directory removed),
// and a new process restores the checkpoint with ReadShardCheckpoint
// (every section's CRC verified) into freshly allocated buffers, as a
// replacement without replicas would:
//   cold   after posix_fadvise(DONTNEED) on the file: the page cache is not
//          dropped globally (/proc/sys/vm/drop_caches needs root and would
//          disturb everyone else on this shared machine), only this file's
//          clean pages are evicted; the fraction still cached is measured
//          with mincore and reported ("cached"); the VM's host may still
//          cache the disk;
//   warm   file in the page cache;
//   warm_prefaulted  destination buffers faulted in before the timing (the
//          pure read + CRC cost).
// Stream probe: the FetchShard stream alone between two fresh processes of
// this binary (a Peer service with the daemon's ShardStreamWriter over a
// pre-faulted buffer; PeerClient::FetchShard into a ShardStreamAssembler
// whose destination is pre-faulted, as an engine is): the first fetch of
// the fresh receiver ("fresh", as in a replacement) and the median of 4
// more ("warm"), with glibc's default heap settings and with shardd's
// (mallopt in shardd_main.cc), CPU of both processes per byte.
// After every recovery run (its cluster stopped), two processes measure raw
// Gloo over 127.0.0.1 (W = 2, TCP device, as bench/collectives drives it):
// one send/recv of the shard's byte count between pre-faulted buffers, the
// median of 9 (--quick: 5) after a warm-up, timed on the receiver from a
// barrier to the end of waitRecv (the x_loopback reference). Each run's
// transfer is compared with the loopback measured right after it, and the
// figure is the median of those per-run ratios: the shared VM drifts
// between runs by more than the 0.8 target's margin (one loopback for all
// runs put the same transfers at 0.69-1.13). The last run's loopback is the
// reference of the other rows. It also sends 2 into a freshly allocated,
// untouched receive buffer:
// first touch of memory costs ~11 us per 4 KiB page on these VMs, which
// bounds anything that lands in fresh memory (an engine's buffers, a
// restore's destination) to a few hundred MB/s. And it sends the same bytes
// in 8 MiB pieces with every receive posted at once, the receiver checking
// each piece's CRC-32C as soon as it lands while the next ones arrive, as
// the replacement verifies the shard ("verified" loopback): on 2 cores the
// checksum's CPU competes with the two sides of the copy, and the row shows
// what that costs raw Gloo.
//
// Figures: recovery_seconds_<m>, checkpoint_restore_seconds_<m> (cold),
// transfer_bw_ratio_to_loopback_<m> and
// transfer_bw_ratio_to_verified_loopback_<m> (the same against the
// verified loopback; the target stays on the plain one) per model; the
// headline
// recovery_seconds_50m, checkpoint_restore_seconds_50m,
// recovery_to_checkpoint_restore_ratio (recovery total / cold restore) and
// transfer_bw_ratio_to_loopback (replacement's transfer bandwidth / raw
// Gloo's, target >= 0.8) come from the 50m model, or with --quick (10m
// only, under a minute) from the 10m model. Without --quick the headline
// model's whole recovery runs 5 times (a fresh cluster and one kill each):
// its recovery_seconds and transfer ratio are the medians of the 5 (each
// run's transfer is a row), its phase rows are the last run's.
//
// Memory: 200m holds ~1.9 GB of shared memory per daemon (shards, AdamW
// state, gradient shard, gathered slots) and the killed daemon's segments
// stay until the directory is removed (they are unlinked as soon as the
// trainers are done); each trainer holds the 800 MB teacher. About 14 GB at
// the peak. Every child gets SIGKILL if this process dies (Subprocess and
// ProcessGroup), daemons are asked to stop with SIGTERM first, and the run
// and checkpoint directories are removed on every exit path
// (--keep_dirs keeps them for inspection).
//
// Run from the repository root (scripts/bench recovery [--quick]); the
// binaries are taken from bazel-bin/ (--bin_dir=DIR to change);
// --models=10m,50m picks models.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "bench/recovery_timeline.h"
#include "client/trainer_client.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/mono_time.h"
#include "daemon/memory/private_allocator.h"
#include "daemon/node/peer_client.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "daemon/recovery/shard_stream.h"
#include "daemon/rpc/exclusive_port.h"
#include "daemon/testing/subprocess.h"
#include "gloo/barrier.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"
#include "shardd/v1/peer.pb.h"
#include "shardd/v1/trainer.pb.h"
#include "tests/collectives/process_group.h"

namespace shardd::bench {
namespace {

using tests::Subprocess;

constexpr int kWorld = 4;
constexpr int kFactor = 2;
constexpr int kKilledRank = 1;
constexpr int kSourceRank = 3;  // Rank 1's replica (same rank mod F).
constexpr int64_t kBatchPerRank = 2;
constexpr int kKillStep = 3;  // The fail point fires during this step.
constexpr double kLr = 1e-4;

struct Options {
  bool quick = false;
  std::string out;
  std::string bin_dir = "bazel-bin";
  std::vector<std::string> models;
  bool keep_dirs = false;
  // Worker modes (this binary re-executed).
  bool restore_worker = false;
  std::string checkpoint;
  std::string restore_mode;  // cold, warm, warm_prefaulted
  bool loopback_worker = false;
  int rank = -1;
  std::string store;
  int64_t bytes = 0;
  int reps = 3;
  bool stream_source = false;
  bool stream_sink = false;
  std::string port_file;
  std::string address;
  int source_pid = 0;
  bool default_malloc = false;  // Skip main's mallopt (stream probe A/B).
};

struct ModelSize {
  std::string name;
  int64_t width = 0;
  int layers = 0;
  int64_t Params() const { return layers * (width * width + width); }
  std::string WidthsFlag() const {
    std::string widths = absl::StrCat(width);
    for (int l = 0; l < layers; ++l) absl::StrAppend(&widths, ",", width);
    return absl::StrCat("--widths=", widths);
  }
  // Hits of allgather.mid per step: every unit in forward, then every unit
  // but the K = 2 still held from forward in backward.
  int GathersPerStep() const { return 2 * layers - 2; }
};

const std::vector<ModelSize>& AllModels() {
  static const auto* models = new std::vector<ModelSize>{
      {"10m", 1024, 10}, {"50m", 2048, 12}, {"200m", 4096, 12}};
  return *models;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// User + system CPU seconds of a process, all threads (0 if unreadable).
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // Fields after the command: state(3) ... utime(14) stime(15).
  std::vector<std::string> f =
      absl::StrSplit(stat.substr(paren + 2), ' ', absl::SkipEmpty());
  int64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string SelfPath() {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return "";
  self[len] = '\0';
  return self;
}

// ------------------------------------------------------------ lines ---

// Every line the children print, stamped on arrival. Thread-safe.
class LineLog {
 public:
  struct Line {
    absl::Time time;
    std::string source;  // "shardd-1", "shardd-1r", "trainer-0", ...
    std::string text;    // "<eof>" once the source's output ended
  };

  void Add(const std::string& source, std::string text) {
    absl::MutexLock lock(&mu_);
    lines_.push_back({absl::Now(), source, std::move(text)});
    added_.SignalAll();
  }

  // The first line of `source` containing `text`, waiting up to deadline.
  absl::StatusOr<Line> WaitFor(const std::string& source,
                               absl::string_view text, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    size_t seen = 0;
    for (;;) {
      for (; seen < lines_.size(); ++seen) {
        const Line& l = lines_[seen];
        if (l.source == source && absl::StrContains(l.text, text)) return l;
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("no line from ", source, " containing '", text, "'"));
      }
      added_.WaitWithDeadline(&mu_, deadline);
    }
  }

  std::vector<Line> Snapshot() const {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::CondVar added_;
  std::vector<Line> lines_ ABSL_GUARDED_BY(mu_);
};

// A child whose stdout a thread reads into the LineLog (and a log file).
// The process is signalled by pid while the thread reads; it is reaped
// only after the thread ended, so the pid cannot be reused meanwhile.
struct Child {
  std::string name;
  std::unique_ptr<Subprocess> process;
  std::thread reader;
  pid_t pid = -1;
};

// ----------------------------------------------------------- cluster ---

// Starts `binary` with `args`; stderr goes to the stdout pipe (merge) or is
// appended to `err_log`.
absl::StatusOr<std::unique_ptr<Subprocess>> Launch(
    const std::string& binary, const std::vector<std::string>& args,
    const std::string& err_log, const std::string& name) {
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      err_log.empty() ? std::string("exec \"$0\" \"$@\" 2>&1")
                      : absl::StrCat("exec \"$0\" \"$@\" 2>>'", err_log, "'"),
      binary};
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Spawn(std::move(argv), name);
}

struct Timeline {
  absl::Time kill;
  absl::Time replacement_spawned;
  absl::Time replacement_listening;
  RecoveredLine recovered;
  // The replacement's last CopyEngineReady event (its daemon's time) and
  // the arrival of its "recovered shard" line.
  absl::Time engine_ready;
  absl::Time recovered_line;
  // The build time of the last engine prepared during the rendezvous (-1:
  // none was).
  double engine_prepared_s = -1;
  int copy_attempts = 0;  // Engines created: 1 unless an attempt failed.
};

// The replacement's CopyEngineReady events up to its recovery's COMPLETE,
// read from its Trainer.WatchEvents into `t`.
absl::Status ReadCopyEvents(const std::string& socket, Timeline& t) {
  absl::StatusOr<std::unique_ptr<client::TrainerClient>> c =
      client::TrainerClient::Create({.target = socket});
  if (!c.ok()) return c.status();
  // Resuming after event 1 replays every event the daemon still holds from
  // 2 on (a snapshot first only when it holds none yet): the copy is over
  // when this runs, and its events come after the attempt's
  // TRANSFERRING_STATE, so none of them is event 1.
  v1::WatchEventsRequest request;
  request.set_after_sequence(1);
  std::unique_ptr<client::EventStream> events =
      (*c)->WatchEvents(request, MonoNow() + absl::Seconds(30));
  v1::TrainerEvent event;
  while (events->Next(&event)) {
    if (event.has_copy_engine_ready()) {
      const v1::CopyEngineReady& ready = event.copy_engine_ready();
      t.engine_ready = absl::FromUnixMillis(event.time_unix_ms());
      ++t.copy_attempts;
      if (ready.prepared_during_rendezvous()) {
        t.engine_prepared_s = ready.build_seconds();
      }
    }
    if (event.has_recovery() &&
        event.recovery().phase() == v1::RECOVERY_PHASE_COMPLETE) {
      events->Cancel();
      (void)events->Finish();
      if (t.copy_attempts == 0) {
        return absl::InternalError(
            "the replacement's events have no CopyEngineReady");
      }
      return absl::OkStatus();
    }
  }
  return absl::Status(events->Finish().code(),
                      "the replacement's events ended before its recovery "
                      "was COMPLETE");
}

struct RecoveryResult {
  ModelSize model;
  RecoveryPhases phases;
  int64_t shard_bytes = 0;
  int64_t recovered_step = 0;
  double replacement_startup_s = 0;  // spawn -> "listening on" (joined)
  double engine_prepared_s = -1;
  int copy_attempts = 0;
  // The direct fetch by this process from rank 3.
  double fetch_fresh_s = 0, fetch_prefaulted_s = 0;
  // CPU seconds of this process and the source daemon during the fetch.
  double fetch_fresh_cpu_s = 0, fetch_prefaulted_cpu_s = 0;
  int64_t fetch_bytes = 0;
};

// A local cluster for one model, and the failure. Destruction stops and
// reaps every process and removes the directory.
class RecoveryRun {
 public:
  RecoveryRun(const Options& options, ModelSize model)
      : options_(options), model_(std::move(model)) {}
  ~RecoveryRun() { Stop(); }

  absl::StatusOr<RecoveryResult> Run() {
    RecoveryResult result;
    result.model = model_;
    if (absl::Status s = StartCluster(); !s.ok()) return s;
    if (absl::Status s = StartTrainers(); !s.ok()) return s;
    absl::StatusOr<Timeline> timeline = KillAndReplace();
    if (!timeline.ok()) return timeline.status();
    if (absl::Status s = WaitTrainers(); !s.ok()) return s;
    // The killed daemon's segments: nobody maps them any more but trainer
    // 1, which has exited.
    RemoveSegmentsOf(killed_pid_);
    if (absl::Status s = Analyse(*timeline, &result); !s.ok()) return s;
    if (absl::Status s = DirectFetch(&result); !s.ok()) return s;
    return result;
  }

  // The shard fetched by DirectFetch (for the checkpoint).
  const v1::ShardHeader& fetched_header() const { return fetched_header_; }
  const std::vector<std::unique_ptr<uint8_t[]>>& fetched_sections() const {
    return fetched_;
  }
  void DropFetched() { fetched_.clear(); }

  void Stop() {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    for (auto& [rank, child] : daemons_) ::kill(child.pid, SIGTERM);
    for (auto& [rank, child] : daemons_) {
      if (!log_.WaitFor(child.name, "<eof>", deadline).ok()) {
        ::kill(child.pid, SIGKILL);
      }
    }
    std::vector<Child*> all;
    for (auto& [rank, child] : daemons_) all.push_back(&child);
    for (Child& c : old_daemons_) all.push_back(&c);
    for (Child& c : trainers_) all.push_back(&c);
    for (Child* c : all) {
      ::kill(c->pid, SIGKILL);  // No-op for those that have exited.
      if (c->reader.joinable()) c->reader.join();
      (void)c->process->Wait(absl::Now() + absl::Seconds(5));
    }
    daemons_.clear();
    old_daemons_.clear();
    trainers_.clear();
    if (coordinator_ != nullptr) {
      coordinator_->Signal(SIGTERM);
      (void)coordinator_->Wait(absl::Now() + absl::Seconds(5));
      coordinator_.reset();
    }
    if (!dir_.empty()) {
      if (options_.keep_dirs) {
        std::cerr << "recovery: kept " << dir_ << "\n";
      } else {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
      }
      dir_.clear();
    }
  }

 private:
  std::string Socket(int r) const {
    return absl::StrCat(dir_, "/shardd-", r, ".sock");
  }

  void StartReader(Child& child) {
    Subprocess* process = child.process.get();
    const std::string name = child.name;
    const std::string path = absl::StrCat(dir_, "/", name, ".out");
    child.reader = std::thread([this, process, name, path] {
      std::ofstream file(path, std::ios::app);
      const absl::Time deadline = absl::Now() + absl::Hours(2);
      for (;;) {
        absl::StatusOr<std::string> line = process->ReadLine(deadline);
        if (!line.ok()) break;
        file << absl::FormatTime("%H:%M:%E6S ", absl::Now(),
                                 absl::LocalTimeZone())
             << *line << "\n"
             << std::flush;
        log_.Add(name, *line);
      }
      log_.Add(name, "<eof>");
    });
  }

  absl::StatusOr<Child> StartDaemon(int rank, const std::string& name,
                                    const std::string& failpoint) {
    std::vector<std::string> args = {
        absl::StrCat("--coordinator=", coordinator_address_),
        absl::StrCat("--identity=node-", rank),
        absl::StrCat("--rank=", rank),
        absl::StrCat("--listen_unix=", Socket(rank)),
        absl::StrCat("--shm_dir=", dir_),
        "--device=cpu"};
    if (!failpoint.empty()) {
      args.push_back(absl::StrCat("--failpoint=", failpoint));
    }
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Launch(options_.bin_dir + "/daemon/node/shardd", args, "", name);
    if (!p.ok()) return p.status();
    Child child;
    child.name = name;
    child.pid = (*p)->pid();
    child.process = std::move(*p);
    StartReader(child);
    return child;
  }

  absl::Status StartCluster() {
    char dir_template[] = "/dev/shm/shardd-recovery.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) {
      return absl::InternalError(
          absl::StrCat("mkdtemp /dev/shm: ", std::strerror(errno)));
    }
    dir_ = dir_template;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<Subprocess>> coordinator =
        Launch(options_.bin_dir + "/daemon/coordinator/coordinator",
               {"--listen=127.0.0.1:0", absl::StrCat("--world_size=", kWorld),
                absl::StrCat("--sharding_factor=", kFactor)},
               CoordinatorLog(), "coordinator");
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = std::move(*coordinator);
    absl::StatusOr<std::string> line =
        coordinator_->WaitForLine("listening on", deadline);
    if (!line.ok()) return line.status();
    // "coordinator listening on 127.0.0.1:PORT (...)"
    std::vector<std::string> words = absl::StrSplit(*line, ' ');
    if (words.size() < 4) return absl::InternalError(*line);
    coordinator_address_ = words[3];
    // In the forward pass of step kKillStep.
    const int n =
        (kKillStep - 1) * model_.GathersPerStep() + model_.layers / 2 + 1;
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<Child> d = StartDaemon(
          r, absl::StrCat("shardd-", r),
          r == kKilledRank ? absl::StrCat("allgather.mid:stop@", n) : "");
      if (!d.ok()) return d.status();
      daemons_[r] = std::move(*d);
    }
    for (auto& [rank, child] : daemons_) {
      absl::StatusOr<LineLog::Line> up =
          log_.WaitFor(child.name, "listening on", deadline);
      if (!up.ok()) return Annotated(up.status());
      // "shardd rank R listening on unix:PATH peer HOST:PORT"
      const size_t at = up->text.find(" peer ");
      if (at == std::string::npos) return absl::InternalError(up->text);
      peer_address_[rank] =
          std::string(absl::StripAsciiWhitespace(up->text.substr(at + 6)));
    }
    return absl::OkStatus();
  }

  std::string CoordinatorLog() const {
    return absl::StrCat(dir_, "/coordinator.err");
  }

  int64_t Steps() const { return kKillStep + (options_.quick ? 1 : 2); }

  absl::Status StartTrainers() {
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<std::unique_ptr<Subprocess>> t =
          Launch(options_.bin_dir + "/client/example_trainer",
                 {absl::StrCat("--socket=", Socket(r)),
                  absl::StrCat("--world_size=", kWorld),
                  absl::StrCat("--rank=", r), model_.WidthsFlag(),
                  absl::StrCat("--batch_per_rank=", kBatchPerRank),
                  absl::StrCat("--steps=", Steps()), "--strategy=HYBRID_SHARD",
                  absl::StrCat("--sharding_factor=", kFactor),
                  absl::StrCat("--lr=", kLr), "--weight_decay=0", "--seed=1",
                  "--rpc_timeout_ms=300000", "--ready_timeout_ms=300000"},
                 absl::StrCat(dir_, "/trainer-", r, ".err"),
                 absl::StrCat("trainer-", r));
      if (!t.ok()) return t.status();
      Child child;
      child.name = absl::StrCat("trainer-", r);
      child.pid = (*t)->pid();
      child.process = std::move(*t);
      StartReader(child);
      trainers_.push_back(std::move(child));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Timeline> KillAndReplace() {
    Timeline t;
    const absl::Time deadline = absl::Now() + absl::Minutes(10);
    absl::StatusOr<LineLog::Line> stopped = log_.WaitFor(
        daemons_[kKilledRank].name, "failpoint allgather.mid: stop", deadline);
    if (!stopped.ok()) return Annotated(stopped.status());
    // The supervisor's reaction: SIGKILL, then the replacement at once.
    t.kill = absl::Now();
    ::kill(daemons_[kKilledRank].pid, SIGKILL);
    killed_pid_ = daemons_[kKilledRank].pid;
    old_daemons_.push_back(std::move(daemons_[kKilledRank]));
    daemons_.erase(kKilledRank);
    t.replacement_spawned = absl::Now();
    absl::StatusOr<Child> replacement =
        StartDaemon(kKilledRank, absl::StrCat("shardd-", kKilledRank, "r"), "");
    if (!replacement.ok()) return replacement.status();
    daemons_[kKilledRank] = std::move(*replacement);
    const std::string name = daemons_[kKilledRank].name;
    absl::StatusOr<LineLog::Line> up =
        log_.WaitFor(name, "listening on", deadline);
    if (!up.ok()) return Annotated(up.status());
    t.replacement_listening = up->time;
    absl::StatusOr<LineLog::Line> recovered =
        log_.WaitFor(name, "recovered shard", deadline);
    if (!recovered.ok()) return Annotated(recovered.status());
    t.recovered_line = recovered->time;
    // The last copy attempt's engine (an attempt that failed, e.g. when the
    // epoch changed under it, reported one too).
    if (absl::Status s = ReadCopyEvents(Socket(kKilledRank), t); !s.ok()) {
      return Annotated(s);
    }
    // For people: why an attempt failed.
    for (const LineLog::Line& l : log_.Snapshot()) {
      if (l.source != name || l.time > recovered->time) continue;
      if (absl::StrContains(l.text, "failed")) {
        std::cerr << "recovery: " << model_.name << ": " << name << ": "
                  << l.text << "\n";
      }
    }
    absl::StatusOr<RecoveredLine> parsed = ParseRecoveredLine(recovered->text);
    if (!parsed.ok()) return parsed.status();
    t.recovered = *parsed;
    return t;
  }

  absl::Status WaitTrainers() {
    const absl::Time deadline = absl::Now() + absl::Minutes(10);
    for (Child& c : trainers_) {
      if (!log_.WaitFor(c.name, "<eof>", deadline).ok()) {
        return absl::DeadlineExceededError(
            absl::StrCat(c.name, " did not finish (logs in ", dir_, ")"));
      }
      c.reader.join();
      absl::StatusOr<int> code = c.process->Wait(deadline);
      if (!code.ok()) return code.status();
      if (*code != 0) {
        return absl::InternalError(absl::StrCat(
            c.name, " exited with ", *code, ": ",
            testing::ReadFileOrEmpty(absl::StrCat(dir_, "/", c.name, ".err")),
            " (--keep_dirs keeps ", dir_, ")"));
      }
    }
    return absl::OkStatus();
  }

  void RemoveSegmentsOf(pid_t pid) {
    const std::string prefix = absl::StrCat("shardd-", pid);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      if (absl::StartsWith(entry.path().filename().string(), prefix)) {
        std::filesystem::remove(entry.path(), ec);
      }
    }
  }

  absl::Status Annotated(const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat(s.message(), " (logs in ", dir_,
                                               "; --keep_dirs keeps them)"));
  }

  absl::Status Analyse(const Timeline& t, RecoveryResult* r) {
    RecoveryObservations obs;
    obs.kill = t.kill;
    obs.killed_rank = kKilledRank;
    obs.world_size = kWorld;
    obs.recovered = t.recovered;
    obs.engine_ready_line = t.engine_ready;
    obs.recovered_line = t.recovered_line;
    std::ifstream in(CoordinatorLog());
    std::string line;
    while (std::getline(in, line)) {
      if (std::optional<CoordinatorDecision> d =
              ParseCoordinatorDecision(line)) {
        obs.decisions.push_back(*std::move(d));
      }
    }
    for (LineLog::Line& l : log_.Snapshot()) {
      if (absl::StartsWith(l.source, "trainer-")) {
        obs.trainer_lines.push_back({l.time, l.source, l.text});
      }
    }
    absl::StatusOr<RecoveryPhases> phases = ComputeRecoveryPhases(obs);
    if (!phases.ok()) return Annotated(phases.status());
    r->phases = *phases;
    r->recovered_step = t.recovered.step;
    r->shard_bytes = t.recovered.bytes;
    r->copy_attempts = t.copy_attempts;
    r->engine_prepared_s = t.engine_prepared_s;
    r->replacement_startup_s =
        absl::ToDoubleSeconds(t.replacement_listening - t.replacement_spawned);
    return absl::OkStatus();
  }

  // Fetches rank 1's shard from rank 3 over Peer.FetchShard, as the
  // replacement does, into fresh buffers and again into the same ones.
  absl::Status DirectFetch(RecoveryResult* r) {
    absl::StatusOr<std::unique_ptr<client::TrainerClient>> c =
        client::TrainerClient::Create({.target = Socket(kSourceRank)});
    if (!c.ok()) return c.status();
    absl::StatusOr<v1::GetStatusResponse> status = (*c)->GetStatus();
    if (!status.ok()) return status.status();
    v1::FetchShardRequest request;
    request.set_epoch(status->epoch());
    request.set_requester_rank(kKilledRank);
    request.set_shard_index(kKilledRank % kFactor);
    request.set_step(status->committed_step());
    // Pass 0 into fresh buffers, then kPrefaultedPasses into the same ones.
    constexpr int kPrefaultedPasses = 3;
    std::vector<double> seconds_prefaulted, cpu_prefaulted;
    const pid_t source_pid = daemons_[kSourceRank].pid;
    for (int pass = 0; pass <= kPrefaultedPasses; ++pass) {
      recovery::ShardStreamAssembler assembler(
          [&](const v1::ShardHeader& header,
              int index) -> absl::StatusOr<uint8_t*> {
            if (pass == 0) {
              // Uninitialised: the first touch happens in the copy.
              fetched_.push_back(
                  std::unique_ptr<uint8_t[]>(new uint8_t[std::max<int64_t>(
                      1, header.sections(index).byte_length())]));
            }
            return fetched_[index].get();
          });
      const double cpu0 = CpuSeconds(getpid()) + CpuSeconds(source_pid);
      const absl::Time t0 = absl::Now();
      absl::Status s = node::PeerClient::FetchShard(
          nullptr, peer_address_[kSourceRank], request,
          MonoNow() + absl::Minutes(5),
          [&](const v1::FetchShardResponse& m) { return assembler.Add(m); });
      if (s.ok()) s = assembler.Finish();
      const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
      const double cpu = CpuSeconds(getpid()) + CpuSeconds(source_pid) - cpu0;
      if (!s.ok()) return s;
      r->fetch_bytes = assembler.header().total_bytes();
      if (pass == 0) {
        r->fetch_fresh_s = seconds;
        r->fetch_fresh_cpu_s = cpu;
      } else {
        seconds_prefaulted.push_back(seconds);
        cpu_prefaulted.push_back(cpu);
      }
      fetched_header_ = assembler.header();
    }
    r->fetch_prefaulted_s = Median(seconds_prefaulted);
    r->fetch_prefaulted_cpu_s = Median(cpu_prefaulted);
    return absl::OkStatus();
  }

  const Options& options_;
  const ModelSize model_;
  std::string dir_;
  std::string coordinator_address_;
  std::unique_ptr<Subprocess> coordinator_;
  LineLog log_;
  std::map<int, Child> daemons_;
  std::vector<Child> old_daemons_;
  std::vector<Child> trainers_;
  std::map<int, std::string> peer_address_;
  pid_t killed_pid_ = -1;
  v1::ShardHeader fetched_header_;
  std::vector<std::unique_ptr<uint8_t[]>> fetched_;
};

// -------------------------------------------------------- checkpoint ---

struct RestoreResult {
  std::string mode;
  double seconds = 0;
  double resident_before = 0;  // Fraction of the file's pages cached.
  int64_t bytes = 0;
};

// Fraction of the file's pages in the page cache.
double ResidentFraction(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  double fraction = -1;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    void* map = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const size_t page = sysconf(_SC_PAGESIZE);
      const size_t pages = (st.st_size + page - 1) / page;
      std::vector<unsigned char> vec(pages);
      if (mincore(map, st.st_size, vec.data()) == 0) {
        size_t resident = 0;
        for (unsigned char v : vec) resident += v & 1;
        fraction = static_cast<double>(resident) / pages;
      }
      munmap(map, st.st_size);
    }
  }
  close(fd);
  return fraction;
}

// Worker: restores the checkpoint once in this fresh process and prints
// "RESULT seconds=S bytes=B resident_before=F".
int RestoreWorker(const Options& o) {
  const std::string& path = o.checkpoint;
  if (o.restore_mode == "cold") {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::cerr << "restore: open " << path << ": " << std::strerror(errno)
                << "\n";
      return 1;
    }
    // The writer fsynced: the pages are clean, and DONTNEED drops them.
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  } else {
    // Warm: read the file once so that it is in the page cache.
    std::ifstream in(path, std::ios::binary);
    std::vector<char> buffer(8 << 20);
    while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) {
    }
  }
  const double resident = ResidentFraction(path);
  // The memory a daemon's engine restores into (PrivateAllocator: huge
  // pages, pre-faulted at allocation).
  memory::PrivateAllocator allocator;
  std::vector<std::unique_ptr<memory::ByteBuffer>> sections;
  auto allocate = [&](int64_t bytes) -> absl::StatusOr<uint8_t*> {
    absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> b =
        allocator.Allocate("section", std::max<int64_t>(1, bytes));
    if (!b.ok()) return b.status();
    sections.push_back(*std::move(b));
    return sections.back()->data();
  };
  if (o.restore_mode == "warm_prefaulted") {
    absl::StatusOr<v1::ShardHeader> header =
        recovery::ReadShardCheckpointHeader(path);
    if (!header.ok()) {
      std::cerr << "restore: " << header.status() << "\n";
      return 1;
    }
    for (const v1::ShardSection& s : header->sections()) {
      if (absl::StatusOr<uint8_t*> p = allocate(s.byte_length()); !p.ok()) {
        std::cerr << "restore: " << p.status() << "\n";
        return 1;
      }
    }
  }
  const bool prefaulted = !sections.empty();
  v1::ShardHeader header;
  const absl::Time t0 = absl::Now();
  const absl::Status s = recovery::ReadShardCheckpoint(
      path,
      [&](const v1::ShardHeader& h, int index) -> absl::StatusOr<uint8_t*> {
        if (!prefaulted) return allocate(h.sections(index).byte_length());
        return sections[index]->data();
      },
      &header);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!s.ok()) {
    std::cerr << "restore: " << s << "\n";
    return 1;
  }
  std::cout << "RESULT seconds=" << seconds << " bytes=" << header.total_bytes()
            << " resident_before=" << resident << std::endl;
  return 0;
}

absl::StatusOr<std::map<std::string, std::string>> RunWorkers(
    const std::vector<std::vector<std::string>>& argvs, const std::string& dir,
    absl::Duration timeout, int result_rank) {
  testing::ProcessGroup group;  // Kills and reaps the workers on any exit.
  std::vector<pid_t> pids;
  for (size_t i = 0; i < argvs.size(); ++i) {
    absl::StatusOr<pid_t> pid =
        group.Spawn(argvs[i], absl::StrCat(dir, "/worker", i, ".out"),
                    absl::StrCat(dir, "/worker", i, ".err"));
    if (!pid.ok()) return pid.status();
    pids.push_back(*pid);
  }
  const absl::Status waited =
      group.WaitForExit(pids, absl::Now() + timeout, /*stop_on_failure=*/true);
  for (size_t i = 0; i < pids.size(); ++i) {
    absl::StatusOr<testing::ChildExit> exit = group.ExitOf(pids[i]);
    if (!exit.ok() || !exit->exited || exit->exit_code != 0) {
      return absl::InternalError(absl::StrCat(
          "worker ", i, ": ",
          exit.ok() ? exit->ToString() : std::string("did not finish"), " ",
          waited.ToString(), "\n",
          testing::ReadFileOrEmpty(absl::StrCat(dir, "/worker", i, ".err"))));
    }
  }
  return testing::ParseResultLine(testing::ReadFileOrEmpty(absl::StrCat(
                                      dir, "/worker", result_rank, ".out")),
                                  "RESULT");
}

struct CheckpointResult {
  double write_s = 0;
  std::vector<RestoreResult> restores;
  int64_t file_bytes = 0;
};

absl::StatusOr<CheckpointResult> MeasureCheckpoint(const Options& o,
                                                   const RecoveryRun& run) {
  char dir_template[] = "/tmp/shardd-recovery-ckpt.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError("mkdtemp /tmp failed");
  }
  const std::string dir = dir_template;
  struct Remove {
    std::string dir;
    bool keep;
    ~Remove() {
      std::error_code ignored;
      if (!keep) std::filesystem::remove_all(dir, ignored);
    }
  } remove{dir, o.keep_dirs};
  CheckpointResult result;
  std::vector<recovery::SectionSource> sources;
  const v1::ShardHeader& header = run.fetched_header();
  for (int i = 0; i < header.sections_size(); ++i) {
    recovery::SectionSource s;
    s.section = header.sections(i);
    s.data = run.fetched_sections()[i].get();
    sources.push_back(std::move(s));
  }
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> path = recovery::WriteShardCheckpoint(
      absl::StrCat(dir, "/ckpt"), kKilledRank, header, sources, 1);
  result.write_s = absl::ToDoubleSeconds(absl::Now() - t0);
  if (!path.ok()) return path.status();
  std::error_code ec;
  result.file_bytes =
      static_cast<int64_t>(std::filesystem::file_size(*path, ec));
  const std::string self = SelfPath();
  for (const char* mode : {"cold", "warm", "warm_prefaulted"}) {
    absl::StatusOr<std::map<std::string, std::string>> fields = RunWorkers(
        {{self, "--restore_worker", absl::StrCat("--checkpoint=", *path),
          absl::StrCat("--restore_mode=", mode)}},
        dir, absl::Minutes(5), 0);
    if (!fields.ok()) return fields.status();
    RestoreResult r;
    r.mode = mode;
    if (!absl::SimpleAtod((*fields)["seconds"], &r.seconds) ||
        !absl::SimpleAtoi((*fields)["bytes"], &r.bytes) ||
        !absl::SimpleAtod((*fields)["resident_before"], &r.resident_before)) {
      return absl::InternalError(
          absl::StrCat("restore worker (", mode, "): no RESULT line"));
    }
    result.restores.push_back(r);
  }
  return result;
}

// ---------------------------------------------------------- loopback ---

// The pieces of the verified loopback: about a 50m section (a unit's
// parameters or one AdamW moment, half of a 2048 x 2049 layer: 8.4 MB).
constexpr size_t kVerifiedPieceBytes = size_t{8} << 20;

// Worker: rank 0 sends o.bytes to rank 1 over raw Gloo (TCP, 127.0.0.1), a
// warm-up and o.reps timed transfers, 2 into fresh memory and o.reps
// verified ones; rank 1 prints
// "RESULT median_s=S min_s=M fresh_s=F verified_s=V".
int LoopbackWorker(const Options& o) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  std::shared_ptr<gloo::transport::Device> device =
      gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(o.store);
  auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, 2);
  context->setTimeout(std::chrono::seconds(300));
  context->connectFullMesh(store, device);
  const size_t bytes = static_cast<size_t>(o.bytes);
  std::unique_ptr<char[]> data(new char[bytes]);
  std::memset(data.get(), o.rank, bytes);  // Pre-fault.
  auto buffer = context->createUnboundBuffer(data.get(), bytes);
  // Pre-faulted buffers: a warm-up and o.reps timed transfers. Then 2 into
  // a freshly allocated, untouched receive buffer each (the first touch of
  // the pages happens in the receive, as in a fresh process).
  std::vector<double> times, fresh_times;
  for (int i = 0; i < 1 + o.reps + 2; ++i) {
    const bool fresh = i > o.reps;
    std::unique_ptr<char[]> fresh_data;
    std::unique_ptr<gloo::transport::UnboundBuffer> fresh_buffer;
    if (fresh && o.rank == 1) {
      fresh_data.reset(new char[bytes]);
      fresh_buffer = context->createUnboundBuffer(fresh_data.get(), bytes);
    }
    gloo::transport::UnboundBuffer& b =
        fresh_buffer != nullptr ? *fresh_buffer : *buffer;
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    const auto t0 = std::chrono::steady_clock::now();
    if (o.rank == 0) {
      b.send(1, /*slot=*/i);
      b.waitSend();
    } else {
      b.recv(0, /*slot=*/i);
      b.waitRecv();
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (fresh) {
      fresh_times.push_back(s);
    } else if (i > 0) {
      times.push_back(s);
    }
  }
  // Verified: the same bytes in kVerifiedPieceBytes pieces, every receive
  // posted at once, and rank 1 checks each piece's CRC-32C as soon as it
  // has landed, while the next ones arrive, as the replacement does with
  // the shard (into pre-faulted memory, like its prepared engine): what
  // raw Gloo achieves with the same verification.
  std::vector<double> verified_times;
  uint32_t crc_sink = 0;
  for (int i = 0; i < o.reps; ++i) {
    const uint64_t slot = 1000 + static_cast<uint64_t>(i);
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::pair<size_t, size_t>> pieces;  // offset, length
    for (size_t at = 0; at < bytes; at += kVerifiedPieceBytes) {
      pieces.push_back({at, std::min(kVerifiedPieceBytes, bytes - at)});
    }
    for (const auto& [offset, length] : pieces) {
      if (o.rank == 0) {
        buffer->send(1, slot, offset, length);
      } else {
        buffer->recv(0, slot, offset, length);
      }
    }
    for (const auto& [offset, length] : pieces) {
      if (o.rank == 0) {
        buffer->waitSend();
      } else {
        buffer->waitRecv();
        crc_sink ^= core::Crc32c(data.get() + offset, length);
      }
    }
    verified_times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  gloo::BarrierOptions barrier(context);
  gloo::barrier(barrier);
  if (o.rank == 1) {
    std::cout << "RESULT median_s=" << Median(times)
              << " min_s=" << *std::min_element(times.begin(), times.end())
              << " fresh_s=" << Median(fresh_times)
              << " verified_s=" << Median(verified_times)
              << " crc_sink=" << crc_sink << std::endl;
  }
  return 0;
}

struct LoopbackResult {
  double median_s = 0;
  double min_s = 0;
  double fresh_s = 0;     // Into an untouched receive buffer.
  double verified_s = 0;  // In pieces, each CRC-32C checked on arrival.
};

absl::StatusOr<LoopbackResult> MeasureLoopback(int64_t bytes, int reps) {
  char dir_template[] = "/tmp/shardd-recovery-gloo.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError("mkdtemp /tmp failed");
  }
  const std::string dir = dir_template;
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove{dir};
  const std::string store = absl::StrCat(dir, "/store");
  std::filesystem::create_directory(store);
  const std::string self = SelfPath();
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < 2; ++r) {
    argvs.push_back({self, "--loopback_worker", absl::StrCat("--rank=", r),
                     absl::StrCat("--store=", store),
                     absl::StrCat("--bytes=", bytes),
                     absl::StrCat("--reps=", reps)});
  }
  absl::StatusOr<std::map<std::string, std::string>> fields =
      RunWorkers(argvs, dir, absl::Minutes(5), 1);
  if (!fields.ok()) return fields.status();
  LoopbackResult r;
  if (!absl::SimpleAtod((*fields)["median_s"], &r.median_s) ||
      !absl::SimpleAtod((*fields)["min_s"], &r.min_s) ||
      !absl::SimpleAtod((*fields)["fresh_s"], &r.fresh_s) ||
      !absl::SimpleAtod((*fields)["verified_s"], &r.verified_s)) {
    return absl::InternalError("loopback worker: no RESULT line");
  }
  return r;
}

// ------------------------------------------------------ stream probe ---

// The FetchShard stream alone, between two processes of this binary: the
// daemon's writer (ShardStreamWriter over a pre-faulted buffer, 36
// sections, the default chunk size) behind a Peer service, and the
// replacement's client (PeerClient::FetchShard into a ShardStreamAssembler
// whose destination is pre-faulted, as the replacement's engine is).
class StreamSource final : public v1::Peer::Service {
 public:
  StreamSource(const uint8_t* data, int64_t bytes)
      : data_(data), bytes_(bytes) {}

  grpc::Status FetchShard(
      grpc::ServerContext* context, const v1::FetchShardRequest* request,
      grpc::ServerWriter<v1::FetchShardResponse>* writer) override {
    constexpr int kSections = 36;
    const int64_t per = bytes_ / kSections;
    std::vector<recovery::SectionSource> sources;
    for (int i = 0; i < kSections; ++i) {
      recovery::SectionSource source;
      source.section.set_unit(i / 3);
      source.section.set_kind(static_cast<v1::ShardSectionKind>(
          v1::SHARD_SECTION_KIND_PARAMETERS + i % 3));
      source.section.set_dtype(v1::DTYPE_FP32);
      source.section.set_numel(per / 4);
      source.section.set_byte_length(per / 4 * 4);
      source.data = data_ + i * (per / 4 * 4);
      sources.push_back(std::move(source));
    }
    absl::StatusOr<recovery::ShardStreamWriter> stream =
        recovery::ShardStreamWriter::Create(v1::ShardHeader(), sources,
                                            request->max_chunk_bytes(), 0);
    if (!stream.ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          std::string(stream.status().message()));
    }
    v1::FetchShardResponse message;
    while (stream->Next(&message)) {
      if (context->IsCancelled() || !writer->Write(message)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "receiver gone");
      }
    }
    return grpc::Status::OK;
  }

 private:
  const uint8_t* data_;
  int64_t bytes_;
};

// Worker: serves o.bytes until killed; writes its port to o.port_file.
int StreamSourceWorker(const Options& o) {
  std::unique_ptr<uint8_t[]> data(new uint8_t[o.bytes]);
  std::memset(data.get(), 7, o.bytes);  // Pre-fault.
  StreamSource service(data.get(), o.bytes);
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) return 1;
  {
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::filesystem::rename(tmp, o.port_file);
  }
  pause();  // The parent kills this process.
  return 0;
}

// Worker: in this fresh process, fetches the stream o.reps + 1 times;
// prints "RESULT fresh_s= fresh_cpu_s= warm_s= warm_cpu_s=" (CPU: this
// process and the source, all threads; warm: the median of the later
// passes).
int StreamSinkWorker(const Options& o) {
  std::unique_ptr<uint8_t[]> data(new uint8_t[o.bytes]);
  std::memset(data.get(), 0, o.bytes);  // Pre-fault, as an engine is.
  std::vector<double> warm_s, warm_cpu;
  double fresh_s = 0, fresh_cpu = 0;
  for (int pass = 0; pass <= o.reps; ++pass) {
    recovery::ShardStreamAssembler assembler(
        [&](const v1::ShardHeader& header,
            int index) -> absl::StatusOr<uint8_t*> {
          return data.get() + header.sections(index).stream_offset();
        });
    const double cpu0 = CpuSeconds(getpid()) + CpuSeconds(o.source_pid);
    const absl::Time t0 = absl::Now();
    absl::Status s = node::PeerClient::FetchShard(
        nullptr, o.address, v1::FetchShardRequest(),
        MonoNow() + absl::Minutes(5),
        [&](const v1::FetchShardResponse& m) { return assembler.Add(m); });
    if (s.ok()) s = assembler.Finish();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    const double cpu = CpuSeconds(getpid()) + CpuSeconds(o.source_pid) - cpu0;
    if (!s.ok()) {
      std::cerr << "stream sink: " << s << "\n";
      return 1;
    }
    if (pass == 0) {
      fresh_s = seconds;
      fresh_cpu = cpu;
    } else {
      warm_s.push_back(seconds);
      warm_cpu.push_back(cpu);
    }
  }
  std::cout << "RESULT fresh_s=" << fresh_s << " fresh_cpu_s=" << fresh_cpu
            << " warm_s=" << Median(warm_s)
            << " warm_cpu_s=" << Median(warm_cpu) << std::endl;
  return 0;
}

struct StreamProbeResult {
  bool default_malloc = false;
  double fresh_s = 0, fresh_cpu_s = 0, warm_s = 0, warm_cpu_s = 0;
};

absl::StatusOr<StreamProbeResult> MeasureStream(int64_t bytes,
                                                bool default_malloc, int reps) {
  char dir_template[] = "/tmp/shardd-recovery-stream.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError("mkdtemp /tmp failed");
  }
  const std::string dir = dir_template;
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove{dir};
  const std::string self = SelfPath();
  const std::string port_file = absl::StrCat(dir, "/port");
  std::vector<std::string> common = {absl::StrCat("--bytes=", bytes)};
  if (default_malloc) common.push_back("--default_malloc");
  testing::ProcessGroup sources;  // Kills the source on every exit path.
  std::vector<std::string> argv = {self, "--stream_source",
                                   absl::StrCat("--port_file=", port_file)};
  argv.insert(argv.end(), common.begin(), common.end());
  absl::StatusOr<pid_t> source = sources.Spawn(
      argv, absl::StrCat(dir, "/source.out"), absl::StrCat(dir, "/source.err"));
  if (!source.ok()) return source.status();
  // The source writes its port once it serves (after pre-faulting).
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  std::string port;
  while (port.empty()) {
    std::ifstream(port_file) >> port;
    if (!port.empty()) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("stream source: no port in ", port_file));
    }
    absl::SleepFor(absl::Milliseconds(20));  // Polling a file, not a sync.
  }
  argv = {self, "--stream_sink", absl::StrCat("--address=127.0.0.1:", port),
          absl::StrCat("--source_pid=", *source),
          absl::StrCat("--reps=", reps)};
  argv.insert(argv.end(), common.begin(), common.end());
  absl::StatusOr<std::map<std::string, std::string>> fields =
      RunWorkers({argv}, dir, absl::Minutes(5), 0);
  if (!fields.ok()) return fields.status();
  StreamProbeResult r;
  r.default_malloc = default_malloc;
  if (!absl::SimpleAtod((*fields)["fresh_s"], &r.fresh_s) ||
      !absl::SimpleAtod((*fields)["fresh_cpu_s"], &r.fresh_cpu_s) ||
      !absl::SimpleAtod((*fields)["warm_s"], &r.warm_s) ||
      !absl::SimpleAtod((*fields)["warm_cpu_s"], &r.warm_cpu_s)) {
    return absl::InternalError("stream sink: no RESULT line");
  }
  return r;
}

// -------------------------------------------------------------- main ---

int Run(const Options& options) {
  std::vector<ModelSize> models;
  for (const ModelSize& m : AllModels()) {
    const bool wanted =
        options.models.empty()
            ? (!options.quick || m.name == "10m")
            : std::find(options.models.begin(), options.models.end(), m.name) !=
                  options.models.end();
    if (wanted) models.push_back(m);
  }
  if (models.empty()) {
    std::cerr << "recovery: --models: none of 10m, 50m, 200m\n";
    return 2;
  }
  BenchReport report("recovery");
  std::string headline;  // The model of the headline figures.
  for (const ModelSize& m : models) {
    if (m.name == "50m" || headline.empty()) headline = m.name;
  }
  for (const ModelSize& model : models) {
    std::cerr << "recovery: " << model.name << " (" << model.Params() / 1e6
              << "M parameters): train, kill daemon " << kKilledRank
              << " in step " << kKillStep << ", replace\n";
    // The headline model's recovery runs 5 times (a fresh cluster each, one
    // kill each) and its figures take the medians: one kill is one sample on
    // a noisy machine. The other models, and --quick, run once.
    const int runs = !options.quick && model.name == headline ? 5 : 1;
    std::vector<double> transfers, totals, loopbacks, verified_loopbacks;
    std::optional<LoopbackResult> loop;  // The last run's.
    std::unique_ptr<RecoveryRun> last;
    absl::StatusOr<RecoveryResult> r = absl::UnknownError("not run");
    for (int i = 0; i < runs; ++i) {
      if (last != nullptr) last->DropFetched();
      last = std::make_unique<RecoveryRun>(options, model);
      r = last->Run();
      if (!r.ok()) {
        std::cerr << "recovery: " << model.name << ": " << r.status() << "\n";
        return 1;
      }
      last->Stop();  // Frees the daemons' memory before the next ones.
      absl::StatusOr<LoopbackResult> l =
          MeasureLoopback(r->shard_bytes, options.quick ? 5 : 9);
      if (!l.ok()) {
        std::cerr << "recovery: " << model.name << ": loopback: " << l.status()
                  << "\n";
        return 1;
      }
      loop = *l;
      transfers.push_back(r->phases.transfer_s);
      totals.push_back(r->phases.total_s);
      loopbacks.push_back(l->median_s);
      verified_loopbacks.push_back(l->verified_s);
      if (runs > 1) {
        std::cerr << "recovery: " << model.name << ": run " << i + 1 << " of "
                  << runs << ": transfer " << r->phases.transfer_s
                  << " s, kill to resumed " << r->phases.total_s << " s\n";
      }
    }
    RecoveryRun& run = *last;
    const double transfer_s = Median(transfers);
    const double total_s = Median(totals);
    std::cerr << "recovery: " << model.name
              << ": checkpoint write/restore, stream probes\n";
    absl::StatusOr<CheckpointResult> ckpt = MeasureCheckpoint(options, run);
    run.DropFetched();
    if (!ckpt.ok()) {
      std::cerr << "recovery: " << model.name
                << ": checkpoint: " << ckpt.status() << "\n";
      return 1;
    }
    std::vector<StreamProbeResult> probes;
    for (bool default_malloc : {true, false}) {
      absl::StatusOr<StreamProbeResult> probe =
          MeasureStream(r->shard_bytes, default_malloc, 4);
      if (!probe.ok()) {
        std::cerr << "recovery: " << model.name
                  << ": stream probe: " << probe.status() << "\n";
        return 1;
      }
      probes.push_back(*probe);
    }
    const double mb = r->shard_bytes / 1e6;
    const double loopback_mbps = mb / loop->median_s;
    // Per run: the loopback measured right after it over its transfer.
    std::vector<double> ratios;
    for (size_t i = 0; i < transfers.size(); ++i) {
      ratios.push_back(loopbacks[i] / transfers[i]);
    }
    const double ratio = Median(ratios);
    // The same against raw Gloo with the replacement's verification (each
    // piece's CRC-32C checked as it lands): how much of the gap to the
    // plain loopback is the checksum's CPU on this 2-core machine.
    std::vector<double> verified_ratios;
    for (size_t i = 0; i < transfers.size(); ++i) {
      verified_ratios.push_back(verified_loopbacks[i] / transfers[i]);
    }
    const double verified_ratio = Median(verified_ratios);
    const RestoreResult& cold = ckpt->restores[0];
    report.AddRow({{"what", std::string("recovery")},
                   {"model", model.name},
                   {"params_M", model.Params() / 1e6},
                   {"shard_MB", mb},
                   {"step_s", r->phases.step_s},
                   {"detection_s", r->phases.detection_s},
                   {"join_wait_s", r->phases.join_wait_s},
                   {"rendezvous_s", r->phases.rendezvous_s},
                   {"transfer_s", r->phases.transfer_s},
                   {"first_step_s", r->phases.first_step_s},
                   {"total_s", r->phases.total_s},
                   {"startup_s", r->replacement_startup_s},
                   {"copy_attempts", static_cast<double>(r->copy_attempts)},
                   {"detected_by", r->phases.detected_by}});
    // Moving the shard's bytes, every way, against raw Gloo.
    auto add = [&](const std::string& what, double seconds,
                   std::optional<double> cached = std::nullopt,
                   std::optional<double> cpu_s = std::nullopt) {
      BenchReport::Row row = {
          {"what", what},         {"model", model.name},
          {"shard_MB", mb},       {"seconds", seconds},
          {"MBps", mb / seconds}, {"x_loopback", mb / seconds / loopback_mbps}};
      if (cached.has_value()) row.push_back({"cached", *cached});
      if (cpu_s.has_value()) {
        row.push_back({"cpu_ns_per_B", *cpu_s * 1e9 / r->shard_bytes});
      }
      report.AddRow(std::move(row));
    };
    for (size_t i = 0; runs > 1 && i < transfers.size(); ++i) {
      // x_loopback against the loopback measured right after this run.
      const double seconds = transfers[i];
      report.AddRow(
          {{"what", absl::StrCat("transfer (replacement), run ", i + 1)},
           {"model", model.name},
           {"shard_MB", mb},
           {"seconds", seconds},
           {"MBps", mb / seconds},
           {"x_loopback", ratios[i]},
           {"loopback_s", loopbacks[i]},
           {"verified_loopback_s", verified_loopbacks[i]}});
    }
    // x_loopback here is the figure: the median of the per-run ratios.
    report.AddRow({{"what", runs > 1 ? "transfer (replacement), median"
                                     : "transfer (replacement)"},
                   {"model", model.name},
                   {"shard_MB", mb},
                   {"seconds", transfer_s},
                   {"MBps", mb / transfer_s},
                   {"x_loopback", ratio},
                   {"loopback_s", Median(loopbacks)},
                   {"verified_loopback_s", Median(verified_loopbacks)}});
    add("  request+header part", r->phases.engine_s);
    add("  data part", r->phases.stream_s);
    if (r->engine_prepared_s >= 0) {
      add("engine prepared (in the rendezvous)", r->engine_prepared_s);
    }
    add("direct fetch, fresh", r->fetch_fresh_s, std::nullopt,
        r->fetch_fresh_cpu_s);
    add("direct fetch, prefaulted", r->fetch_prefaulted_s, std::nullopt,
        r->fetch_prefaulted_cpu_s);
    for (const StreamProbeResult& p : probes) {
      const std::string malloc_name = p.default_malloc ? "default" : "tuned";
      add(absl::StrCat("stream probe, ", malloc_name, " malloc, fresh"),
          p.fresh_s, std::nullopt, p.fresh_cpu_s);
      add(absl::StrCat("stream probe, ", malloc_name, " malloc, warm"),
          p.warm_s, std::nullopt, p.warm_cpu_s);
    }
    add("raw gloo send/recv", loop->median_s);
    add("raw gloo, fresh recv buffer", loop->fresh_s);
    add("raw gloo, 8 MiB pieces CRC-checked", loop->verified_s);
    add("checkpoint write", ckpt->write_s);
    for (const RestoreResult& restore : ckpt->restores) {
      add(absl::StrCat("restore, ", restore.mode), restore.seconds,
          restore.resident_before);
    }
    report.SetFigure(absl::StrCat("recovery_seconds_", model.name), total_s);
    report.SetFigure(absl::StrCat("checkpoint_restore_seconds_", model.name),
                     cold.seconds);
    report.SetFigure(absl::StrCat("transfer_bw_ratio_to_loopback_", model.name),
                     ratio);
    report.SetFigure(
        absl::StrCat("transfer_bw_ratio_to_verified_loopback_", model.name),
        verified_ratio);
    if (model.name == headline) {
      report.SetFigure("recovery_to_checkpoint_restore_ratio",
                       total_s / cold.seconds);
      report.SetFigure("transfer_bw_ratio_to_loopback", ratio);
      report.SetFigure("transfer_bw_ratio_to_verified_loopback",
                       verified_ratio);
    }
  }
  return report.Publish(options.out, std::cout, std::cerr);
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  shardd::bench::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](absl::string_view flag) -> std::optional<std::string> {
      const std::string prefix = absl::StrCat(flag, "=");
      if (!absl::StartsWith(arg, prefix)) return std::nullopt;
      return arg.substr(prefix.size());
    };
    if (arg == "--quick") {
      options.quick = true;
    } else if (arg == "--keep_dirs") {
      options.keep_dirs = true;
    } else if (arg == "--restore_worker") {
      options.restore_worker = true;
    } else if (arg == "--loopback_worker") {
      options.loopback_worker = true;
    } else if (arg == "--stream_source") {
      options.stream_source = true;
    } else if (arg == "--stream_sink") {
      options.stream_sink = true;
    } else if (arg == "--default_malloc") {
      options.default_malloc = true;
    } else if (auto v = value("--port_file")) {
      options.port_file = *v;
    } else if (auto v = value("--address")) {
      options.address = *v;
    } else if (auto v = value("--out")) {
      options.out = *v;
    } else if (auto v = value("--bin_dir")) {
      options.bin_dir = *v;
    } else if (auto v = value("--models")) {
      options.models = absl::StrSplit(*v, ',', absl::SkipEmpty());
    } else if (auto v = value("--checkpoint")) {
      options.checkpoint = *v;
    } else if (auto v = value("--restore_mode")) {
      options.restore_mode = *v;
    } else if (auto v = value("--store")) {
      options.store = *v;
    } else if (auto v = value("--rank");
               v && absl::SimpleAtoi(*v, &options.rank)) {
    } else if (auto v = value("--source_pid");
               v && absl::SimpleAtoi(*v, &options.source_pid)) {
    } else if (auto v = value("--bytes");
               v && absl::SimpleAtoi(*v, &options.bytes)) {
    } else if (auto v = value("--reps");
               v && absl::SimpleAtoi(*v, &options.reps)) {
    } else {
      std::cerr << "usage: " << argv[0]
                << " [--quick] [--out=PATH] [--bin_dir=DIR] "
                   "[--models=10m,50m,200m] [--keep_dirs]\n";
      return 2;
    }
  }
  // The same heap settings as shardd's main (see there), so that this
  // process's own FetchShard client behaves like a daemon's; the stream
  // probe's workers run once without them (--default_malloc).
  if (!options.default_malloc) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }
  if (options.stream_source) {
    return shardd::bench::StreamSourceWorker(options);
  }
  if (options.stream_sink) return shardd::bench::StreamSinkWorker(options);
  if (options.restore_worker) return shardd::bench::RestoreWorker(options);
  if (options.loopback_worker) return shardd::bench::LoopbackWorker(options);
  return shardd::bench::Run(options);
}
