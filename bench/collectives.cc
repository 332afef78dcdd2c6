// bench/collectives: our GlooCollective against raw Gloo called directly, in
// the same processes and the same run, over W processes on 127.0.0.1.
//
// The parent spawns W copies of this binary (--worker) for each W. Every
// worker forms two communicators through a shared temporary directory: ours
// (CreateGlooCollective over a FileStore) and a raw gloo::rendezvous::Context
// (gloo's FileStore, its own TCP device). Buffers are allocated once per
// worker, at the largest size, and pre-faulted (first touch is very slow on
// these VMs); every operation reuses them.
//
// Operations (fp32, sum): all-gather, reduce-scatter, all-reduce and
// broadcast (root 0), for sizes 4 KiB .. 256 MiB in powers of 4 (--quick:
// W = 2 and 4 up to 16 MiB). Size = the whole buffer (all-gather output,
// reduce-scatter input), bandwidths by the nccl-tests convention:
//   algbw = size / time;
//   busbw = algbw * (W-1)/W  for all-gather and reduce-scatter,
//           algbw * 2(W-1)/W for all-reduce, algbw for broadcast.
// Raw Gloo counterparts: gloo::allgather, gloo::allreduce (ring),
// gloo::broadcast; for reduce-scatter the best Gloo offers for the same
// result, measured both ways in the same run and the faster (by busbw) kept
// per size: ReduceScatterHalvingDoubling (the old-style algorithm, set up
// once per size outside the timing) and a ring all-reduce of the whole input
// (which contains the scattered result) counted by the all-reduce busbw.
//
// Timing: each repetition starts after a raw Gloo barrier; a repetition's
// time is the slowest rank's. Ours and Gloo alternate within each
// repetition, in ABBA order (ours first in even repetitions, Gloo first in
// odd ones), after warm-up. The headline ratio is PAIRED: per repetition,
// Gloo's time over ours (as busbw), then the median over repetitions, so
// that what the shared two cores are doing at one moment weighs on both
// sides of a pair alike. Repetitions come in blocks (60 up to 4 MiB, 30 to
// 16 MiB, 12 at 64 MiB, 6 at 256 MiB; --quick 16, 10) until that median's
// 95% confidence interval is within +-0.05 or a cap is reached (300, 120,
// 36, 12; --quick 32, 10); the interval is in the JSON. The blocks of all
// points of one W are interleaved (a round runs one block of every
// unfinished point), so each point's repetitions are spread over the run:
// the machine drifts over minutes, and a slow spell then weighs on every
// point alike instead of on whichever point it hit. The worst median
// over sizes >= 1 MiB and every W is the figure. The table reports each
// side's MEDIAN time; ratios from each side's best-of-N and median times
// are in the JSON too.
//
// FSDP observation (W = 4): the same total (64 MiB; --quick 16 MiB)
// all-gathered as one flat buffer or as N per-tensor gathers of total/N
// bytes (N = 1 .. 1024; ours issued back to back asynchronously and then
// waited for, raw Gloo called N times); the figure
// per_call_overhead_dominates_below_bytes is the per-gather size at which
// ours falls to half of the flat throughput (interpolated log-linearly
// between the measured sizes), and bench/results/
// collectives_flat_vs_per_tensor.png plots it (gnuplot).
//
// --control (an A/A run): ours is replaced by the same raw Gloo calls on a
// second context with its own TCP device and store, set up as ours is
// (reduce-scatter: halving-doubling against halving-doubling); everything
// else is unchanged, and the figures are named control_<op>_...: what
// identical code scores on the same statistics, i.e. the noise floor of the
// worst-point figure on this machine. No FSDP table in that mode.
//
// Run time on the 2-core VM: --quick about half a minute; the full run
// several minutes (W = 8 on 2 cores is slow, and 256 MiB at W = 8 needs
// ~1 GiB per process).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/file_store.h"
#include "daemon/comm/gloo_collective.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "tests/collectives/process_group.h"

namespace shardd::bench {
namespace {

using comm::Collective;
using comm::OpOptions;
using comm::ReduceOp;
using core::DType;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

struct Options {
  bool quick = false;
  std::string out;
  // Worker mode.
  bool worker = false;
  int rank = -1;
  int size = 0;
  std::string store;
  bool fsdp = false;
  // Raw Gloo only (no GlooCollective): a baseline of the machine.
  bool raw_only = false;
  // An A/A control: ours replaced by raw Gloo on a second context, so that
  // the ratios and their spread show what identical code scores here.
  bool control = false;
  // Only these operations / world sizes (empty: all), for looking into one
  // point without the whole run.
  std::vector<std::string> ops;
  std::vector<int> worlds;
  int64_t min_bytes = 0;
  int64_t max_bytes = 0;  // 0: no bound.
};

[[noreturn]] void Die(absl::string_view message) {
  std::cerr << "bench/collectives: " << message << std::endl;
  std::exit(1);
}

void Check(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

// 4 KiB .. 256 MiB (--quick 16 MiB) in powers of 4, within [min, max]
// (0: no bound).
std::vector<int64_t> Sizes(bool quick, int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t s = 4 * kKiB; s <= (quick ? 16 * kMiB : 256 * kMiB); s *= 4) {
    if (s >= min_bytes && (max_bytes == 0 || s <= max_bytes)) {
      sizes.push_back(s);
    }
  }
  return sizes;
}

// Repetitions per point (after warm-up). The headline takes the best of
// them per side: on 2 cores shared by W processes interference only ever
// slows a repetition down, so the best converges on the undisturbed time
// as repetitions grow, and the worst point over 15 needs enough of them.
int Reps(int64_t bytes, bool quick) {
  if (bytes <= 4 * kMiB) return quick ? 16 : 60;
  if (bytes <= 16 * kMiB) return quick ? 10 : 30;
  if (bytes <= 64 * kMiB) return 12;
  return 6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The most repetitions one point may take while its paired ratio is still
// uncertain (cheap sizes can afford many; --quick stays near its block).
int MaxReps(int64_t bytes, bool quick) {
  if (bytes <= 4 * kMiB) return quick ? 32 : 300;
  if (bytes <= 16 * kMiB) return quick ? 10 : 120;
  if (bytes <= 64 * kMiB) return 36;
  return 12;
}

// Target precision of a point's paired ratio: +-0.05 at 95%.
constexpr double kHalfWidth = 0.05;

// A median with its distribution-free 95% confidence interval: the order
// statistics n/2 -+ 0.98 sqrt(n) (the binomial(n, 1/2) normal
// approximation).
struct PairedCi {
  double median = 0, lo = 0, hi = 0;
};
PairedCi MedianCi(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const double half = 0.98 * std::sqrt(n);
  const auto at = [&](double k) {
    const int64_t i = std::clamp<int64_t>(static_cast<int64_t>(std::floor(k)),
                                          0, static_cast<int64_t>(n) - 1);
    return v[static_cast<size_t>(i)];
  };
  return {Median(v), at(n / 2 - half), at(std::ceil(n / 2 + half))};
}

// A pre-faulted, 2 MiB-aligned float buffer (huge pages requested).
class Buffer {
 public:
  explicit Buffer(int64_t bytes) {
    constexpr size_t kAlign = size_t{2} << 20;
    bytes_ = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<float*>(std::aligned_alloc(kAlign, bytes_));
    if (data_ == nullptr) Die(absl::StrCat("out of memory: ", bytes_, " B"));
    madvise(data_, bytes_, MADV_HUGEPAGE);  // Advisory.
    Fill(bytes_, 0.0f);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() const { return data_; }
  // Zeros keep repeated in-place reductions finite; the transports and the
  // summation cost the same for any finite, normal values.
  void Fill(int64_t bytes, float v) {
    std::fill(data_, data_ + bytes / sizeof(float), v);
  }

 private:
  size_t bytes_ = 0;
  float* data_ = nullptr;
};

// ------------------------------------------------------------- worker ---

class Worker {
 public:
  explicit Worker(const Options& o) : o_(o), rank_(o.rank), world_(o.size) {}

  void Run() {
    Connect();
    const std::vector<int64_t> sizes =
        Sizes(o_.quick, o_.min_bytes, o_.max_bytes);
    if (sizes.empty()) Die("no sizes within --min_bytes/--max_bytes");
    const int64_t max_bytes = sizes.back();
    a_ = std::make_unique<Buffer>(max_bytes);
    b_ = std::make_unique<Buffer>(max_bytes);
    RawBarrier();
    std::vector<Point> points;
    for (const char* op :
         {"allgather", "reducescatter", "allreduce", "broadcast"}) {
      if (!o_.ops.empty() &&
          std::find(o_.ops.begin(), o_.ops.end(), op) == o_.ops.end()) {
        continue;
      }
      for (int64_t bytes : sizes) points.push_back(MakePoint(op, bytes));
    }
    // Rounds: one block of repetitions of every unfinished point per round,
    // so that each point's repetitions are spread over the run instead of
    // taken in one stretch. The shared machine drifts over minutes; this
    // way a slow spell weighs on every point alike rather than spoiling
    // whichever point it happened to hit. Every rank holds the same times
    // (MaxOverRanks), so every rank runs the same blocks.
    for (bool unfinished = true; unfinished;) {
      unfinished = false;
      for (Point& point : points) {
        if (point.done) continue;
        RunBlock(point);
        unfinished = true;
      }
    }
    if (rank_ == 0) {
      for (const Point& point : points) PrintRow(point);
    }
    if (o_.fsdp) FlatVsPerTensor(o_.quick ? 16 * kMiB : 64 * kMiB);
    RawBarrier();
    ours_.reset();
  }

 private:
  void Connect() {
    if (!o_.raw_only && !o_.control) ConnectOurs();
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    device_ = gloo::transport::tcp::CreateDevice(attr);
    raw_store_ = std::make_unique<gloo::rendezvous::FileStore>(
        absl::StrCat(o_.store, "/raw"));
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    context->setTimeout(std::chrono::seconds(300));
    context->connectFullMesh(*raw_store_, device_);
    raw_ = context;
    if (o_.control) {
      ctrl_device_ = gloo::transport::tcp::CreateDevice(attr);
      ctrl_store_ = std::make_unique<gloo::rendezvous::FileStore>(
          absl::StrCat(o_.store, "/ctrl"));
      auto c = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
      c->setTimeout(std::chrono::seconds(300));
      c->connectFullMesh(*ctrl_store_, ctrl_device_);
      ctrl_ = c;
    }
  }

  void ConnectOurs() {
    comm::FileStore store(absl::StrCat(o_.store, "/ours"));
    comm::GlooCollectiveOptions options;
    options.rank = rank_;
    options.size = world_;
    options.epoch = 1;
    options.group = "bench";
    options.connect_timeout = absl::Seconds(120);
    options.default_op_timeout = absl::Seconds(300);
    absl::StatusOr<std::unique_ptr<Collective>> ours =
        comm::CreateGlooCollective(options, store);
    Check(ours.status(), "CreateGlooCollective");
    ours_ = std::move(*ours);
  }

  void RawBarrier() {
    gloo::BarrierOptions opts(raw_);
    gloo::barrier(opts);
  }

  // Runs `fn` after a barrier; returns this rank's seconds.
  template <typename Fn>
  double TimeOne(Fn&& fn) {
    RawBarrier();
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }

  // Element-wise max over ranks (each repetition's slowest rank).
  void MaxOverRanks(std::vector<double>& v) {
    if (v.empty()) return;
    gloo::AllreduceOptions opts(raw_);
    opts.setOutput(v.data(), v.size());
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::max<double>));
    gloo::allreduce(opts);
  }

  void OursWait(const std::shared_ptr<comm::Work>& work, absl::string_view op) {
    Check(work->Wait(), absl::StrCat("ours ", op));
  }

  void RawAllreduce(const std::shared_ptr<gloo::Context>& ctx, float* p,
                    int64_t n) {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(p, n);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
    gloo::allreduce(opts);
  }

  void RawAllgather(const std::shared_ptr<gloo::Context>& ctx, const float* in,
                    float* out, int64_t per_rank) {
    gloo::AllgatherOptions opts(ctx);
    opts.setInput(const_cast<float*>(in), per_rank);
    opts.setOutput(out, per_rank * world_);
    gloo::allgather(opts);
  }

  // One (operation, size) point: Gloo's reduce-scatter for it (set up once,
  // outside the timing) and the repetitions so far.
  struct Point {
    std::string op;
    int64_t bytes = 0;
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rshd;
    // --control: the same on the second context.
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> ctrl_rshd;
    std::vector<double> t_ours, t_raw, t_ring;
    PairedCi ci;
    bool done = false;
  };

  Point MakePoint(const std::string& op, int64_t bytes) {
    Point point;
    point.op = op;
    point.bytes = bytes;
    if (op == "reducescatter") {
      const int64_t n = bytes / 4;
      point.rshd = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
          raw_, std::vector<float*>{b_->data()}, static_cast<int>(n),
          std::vector<int>(world_, static_cast<int>(n / world_)));
      if (o_.control) {
        point.ctrl_rshd =
            std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
                ctrl_, std::vector<float*>{b_->data()}, static_cast<int>(n),
                std::vector<int>(world_, static_cast<int>(n / world_)));
      }
    }
    return point;
  }

  // Warm-up, then one block of repetitions of `point`; marks it done once
  // its median paired ratio is known to +-kHalfWidth (95%) or it has run
  // its most repetitions. The buffers hold zeros throughout (Buffer), which
  // keeps repeated in-place reductions finite.
  void RunBlock(Point& point) {
    const std::string& op = point.op;
    const int64_t bytes = point.bytes;
    const int64_t n = bytes / 4;
    const int64_t shard = n / world_;
    const std::vector<int64_t> counts(world_, shard);
    float* a = a_->data();
    float* b = b_->data();
    // Issued and waited for at once, as the daemon's step engine does
    // (OpOptions::caller_waits: run on this thread while idle).
    OpOptions waited;
    waited.caller_waits = true;
    // Raw Gloo's side on one context: `raw_`, or under --control also the
    // second context `ctrl_` in place of ours.
    auto gloo_on = [&](const std::shared_ptr<gloo::Context>& ctx,
                       gloo::ReduceScatterHalvingDoubling<float>* rshd) {
      if (op == "allgather") {
        RawAllgather(ctx, a, b, shard);
      } else if (op == "reducescatter") {
        rshd->run();
      } else if (op == "allreduce") {
        RawAllreduce(ctx, a, n);
      } else {
        gloo::BroadcastOptions opts(ctx);
        opts.setOutput(a, n);
        opts.setRoot(0);
        gloo::broadcast(opts);
      }
    };
    auto ours = [&] {
      if (o_.control) {
        gloo_on(ctrl_, point.ctrl_rshd.get());
      } else if (op == "allgather") {
        OursWait(ours_->AllGather(a, b, counts, DType::kFloat32, waited), op);
      } else if (op == "reducescatter") {
        OursWait(ours_->ReduceScatter(a, b, counts, DType::kFloat32,
                                      ReduceOp::kSum, waited),
                 op);
      } else if (op == "allreduce") {
        OursWait(
            ours_->AllReduce(a, n, DType::kFloat32, ReduceOp::kSum, waited),
            op);
      } else {
        OursWait(ours_->Broadcast(a, n, DType::kFloat32, 0, waited), op);
      }
    };
    auto raw = [&] { gloo_on(raw_, point.rshd.get()); };
    auto raw_ring = [&] { RawAllreduce(raw_, b, n); };  // reduce-scatter only

    // Every block starts warm: the point before it left other sizes in the
    // caches and TCP windows.
    const int warmup = bytes <= kMiB ? 2 : 1;
    const bool ring_timed = op == "reducescatter" && !o_.control;
    for (int i = 0; i < warmup; ++i) {
      if (!o_.raw_only) TimeOne(ours);
      TimeOne(raw);
      if (ring_timed) TimeOne(raw_ring);
    }
    const int block = Reps(bytes, o_.quick);
    const int max_reps = MaxReps(bytes, o_.quick);
    std::vector<double> bo, br, bg;
    for (int i = 0; i < block; ++i) {
      // ABBA: which side goes first alternates, so that neither always
      // runs right after the other (caches, the TCP windows it left).
      double to = 0, tr = 0, tg = 0;
      if ((point.t_ours.size() + i) % 2 == 0) {
        to = o_.raw_only ? 0.0 : TimeOne(ours);
        tr = TimeOne(raw);
        tg = ring_timed ? TimeOne(raw_ring) : 0.0;
      } else {
        tg = ring_timed ? TimeOne(raw_ring) : 0.0;
        tr = TimeOne(raw);
        to = o_.raw_only ? 0.0 : TimeOne(ours);
      }
      bo.push_back(to);
      br.push_back(tr);
      bg.push_back(tg);
    }
    MaxOverRanks(bo);
    MaxOverRanks(br);
    MaxOverRanks(bg);
    point.t_ours.insert(point.t_ours.end(), bo.begin(), bo.end());
    point.t_raw.insert(point.t_raw.end(), br.begin(), br.end());
    point.t_ring.insert(point.t_ring.end(), bg.begin(), bg.end());
    // Paired: each repetition's Gloo time over ours in the SAME repetition
    // (they ran back to back), as a bus-bandwidth ratio. What the shared
    // machine is doing at that moment weighs on both sides of one pair
    // alike. For reduce-scatter Gloo's side is the faster of its two ways
    // by median (the ring all-reduce counted by the all-reduce busbw, twice
    // the reduce-scatter factor), the same way in every repetition: taking
    // the faster of the two in each repetition would hand Gloo the luckier
    // of two noisy samples.
    bool ring_side = false;
    // --control compares halving-doubling with itself.
    if (op == "reducescatter" && !o_.control) {
      ring_side = Median(point.t_ring) / 2 < Median(point.t_raw);
    }
    std::vector<double> paired;
    for (size_t i = 0; i < point.t_ours.size(); ++i) {
      const double gloo_t = ring_side ? point.t_ring[i] / 2 : point.t_raw[i];
      if (point.t_ours[i] > 0) paired.push_back(gloo_t / point.t_ours[i]);
    }
    if (paired.empty()) {  // --raw_only
      point.done = true;
      return;
    }
    point.ci = MedianCi(paired);
    point.done = point.ci.hi - point.ci.lo <= 2 * kHalfWidth ||
                 static_cast<int>(point.t_ours.size()) + block > max_reps;
  }

  void PrintRow(const Point& point) {
    const auto min = [](const std::vector<double>& v) {
      return *std::min_element(v.begin(), v.end());
    };
    std::cout << "ROW " << point.op << " " << world_ << " " << point.bytes
              << " " << Median(point.t_ours) << " " << min(point.t_ours) << " "
              << Median(point.t_raw) << " " << min(point.t_raw) << " "
              << Median(point.t_ring) << " " << min(point.t_ring) << " "
              << point.t_ours.size() << " " << point.ci.median << " "
              << point.ci.lo << " " << point.ci.hi << std::endl;
  }

  void FlatVsPerTensor(int64_t total) {
    float* a = a_->data();
    float* b = b_->data();
    const int max_n = o_.quick ? 256 : 1024;
    for (int tensors = 1; tensors <= max_n; tensors *= 2) {
      const int64_t per_gather = total / tensors;  // bytes of one output
      const int64_t shard = per_gather / 4 / world_;
      const std::vector<int64_t> counts(world_, shard);
      auto ours = [&] {
        std::vector<std::shared_ptr<comm::Work>> works;
        works.reserve(tensors);
        for (int t = 0; t < tensors; ++t) {
          works.push_back(ours_->AllGather(
              a + t * shard, b + t * shard * world_, counts, DType::kFloat32));
        }
        for (auto& w : works) OursWait(w, "per-tensor allgather");
      };
      auto raw = [&] {
        for (int t = 0; t < tensors; ++t) {
          RawAllgather(raw_, a + t * shard, b + t * shard * world_, shard);
        }
      };
      const int reps = o_.quick ? 3 : 5;
      std::vector<double> t_ours, t_raw;
      for (int i = 0; i < 1 + reps; ++i) {
        const double to = o_.raw_only ? 0.0 : TimeOne(ours);
        const double tr = TimeOne(raw);
        if (i == 0) continue;
        t_ours.push_back(to);
        t_raw.push_back(tr);
      }
      MaxOverRanks(t_ours);
      MaxOverRanks(t_raw);
      if (rank_ == 0) {
        std::cout << "FSDP " << world_ << " " << total << " " << tensors << " "
                  << per_gather << " " << Median(t_ours) << " " << Median(t_raw)
                  << std::endl;
      }
    }
  }

  const Options& o_;
  const int rank_;
  const int world_;
  std::unique_ptr<Collective> ours_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::unique_ptr<gloo::rendezvous::FileStore> raw_store_;
  std::shared_ptr<gloo::rendezvous::Context> raw_;
  std::shared_ptr<gloo::transport::Device> ctrl_device_;
  std::unique_ptr<gloo::rendezvous::FileStore> ctrl_store_;
  std::shared_ptr<gloo::rendezvous::Context> ctrl_;
  std::unique_ptr<Buffer> a_, b_;
};

// ------------------------------------------------------------- parent ---

double BusFactor(const std::string& op, int w) {
  if (op == "allreduce") return 2.0 * (w - 1) / w;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(w - 1) / w;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes >= kMiB) return absl::StrCat(bytes / kMiB, " MiB");
  return absl::StrCat(bytes / kKiB, " KiB");
}

struct FsdpRow {
  int tensors;
  int64_t per_gather;
  double ours_s;
  double raw_s;
};

// Runs W workers; returns their rank-0 stdout.
std::string RunWorld(const Options& o, int world, bool fsdp) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) Die("readlink /proc/self/exe");
  self[len] = '\0';
  char dir_template[] = "/tmp/shardd-bench-collectives.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) Die("mkdtemp");
  for (const char* sub : {"/ours", "/raw", "/ctrl"}) {
    const std::string path = absl::StrCat(dir, sub);
    if (mkdir(path.c_str(), 0700) != 0) Die(absl::StrCat("mkdir ", path));
  }
  testing::ProcessGroup group;  // Kills and reaps the workers on any exit.
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {
        self, "--worker", absl::StrCat("--rank=", r),
        absl::StrCat("--size=", world), absl::StrCat("--store=", dir)};
    if (o.quick) argv.push_back("--quick");
    if (fsdp) argv.push_back("--fsdp");
    if (o.raw_only) argv.push_back("--raw_only");
    if (o.control) argv.push_back("--control");
    if (!o.ops.empty()) {
      argv.push_back(absl::StrCat("--ops=", absl::StrJoin(o.ops, ",")));
    }
    argv.push_back(absl::StrCat("--min_bytes=", o.min_bytes));
    argv.push_back(absl::StrCat("--max_bytes=", o.max_bytes));
    absl::StatusOr<pid_t> pid =
        group.Spawn(argv, absl::StrCat(dir, "/rank", r, ".out"),
                    absl::StrCat(dir, "/rank", r, ".err"));
    Check(pid.status(), "spawn worker");
    pids.push_back(*pid);
  }
  const absl::Status waited = group.WaitForExit(
      pids, absl::Now() + (o.quick ? absl::Minutes(3) : absl::Minutes(40)),
      /*stop_on_failure=*/true);
  std::string errors;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<testing::ChildExit> exit = group.ExitOf(pids[r]);
    if (!exit.ok() || !exit->exited || exit->exit_code != 0) {
      absl::StrAppend(
          &errors, "rank ", r, ": ",
          exit.ok() ? exit->ToString() : std::string("did not finish"), "\n",
          testing::ReadFileOrEmpty(absl::StrCat(dir, "/rank", r, ".err")));
    }
  }
  if (!waited.ok() || !errors.empty()) {
    Die(absl::StrCat("W=", world, ": ", waited.ToString(), "\n", errors));
  }
  const std::string out =
      testing::ReadFileOrEmpty(absl::StrCat(dir, "/rank0.out"));
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return out;
}

// Binary-unit tick labels at the measured sizes.
std::string XTics(const std::vector<FsdpRow>& rows) {
  std::string tics = "set xtics (";
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::StrAppend(&tics, i == 0 ? "" : ", ", "\"",
                    HumanBytes(rows[i].per_gather), "\" ", rows[i].per_gather);
  }
  // Some margin so that the end ticks are labelled too.
  return absl::StrCat(tics, ")\nset xrange [", rows.back().per_gather / 1.5,
                      ":", rows.front().per_gather * 1.5, "]\n");
}

void Plot(const std::vector<FsdpRow>& rows, int world, int64_t total,
          double flat_gbps, const std::string& png) {
  std::string script = absl::StrCat(
      "set terminal png size 900,560\n", "set output '", png, "'\n",
      "set title 'All-gather of ", HumanBytes(total), " at W = ", world,
      ": one flat buffer vs N per-tensor gathers'\n",
      "set xlabel 'bytes per gather (output)'\n", "set ylabel 'algbw (GB/s)'\n",
      "set logscale x 2\n", "set grid\n", "set key bottom right\n", XTics(rows),
      "plot '-' using 1:2 with linespoints title 'ours, N per-tensor "
      "gathers', ",
      "'-' using 1:2 with linespoints title 'raw Gloo, N per-tensor gathers', ",
      flat_gbps, " with lines dashtype 2 title 'ours, flat', ", flat_gbps / 2,
      " with lines dashtype 3 title 'half of flat'\n");
  for (int pass = 0; pass < 2; ++pass) {
    for (const FsdpRow& r : rows) {
      const double s = pass == 0 ? r.ours_s : r.raw_s;
      absl::StrAppend(&script, r.per_gather, " ", total / s / 1e9, "\n");
    }
    absl::StrAppend(&script, "e\n");
  }
  FILE* gp = popen("gnuplot 2>&1", "w");
  if (gp == nullptr) {
    std::cerr << "gnuplot not available: no plot written\n";
    return;
  }
  fwrite(script.data(), 1, script.size(), gp);
  const int rc = pclose(gp);
  if (rc != 0) {
    std::cerr << "gnuplot failed (is gnuplot-nox installed?): no plot\n";
  } else {
    std::cout << "plot: " << png << "\n";
  }
}

int RunParent(const Options& o) {
  BenchReport report("collectives");
  const std::vector<int> worlds = !o.worlds.empty() ? o.worlds
                                  : o.quick         ? std::vector<int>{2, 4}
                                                    : std::vector<int>{2, 4, 8};
  std::map<std::string, std::vector<double>> ratios_ge_1mib;
  std::map<std::string, std::vector<double>> median_ratios_ge_1mib;
  std::map<std::string, std::vector<double>> best_ratios_ge_1mib;
  std::map<std::string, std::vector<double>> ci_hi_ge_1mib;
  std::vector<FsdpRow> fsdp;
  int64_t fsdp_total = 0;
  int fsdp_world = 0;
  for (int world : worlds) {
    const bool with_fsdp = world == 4 && o.ops.empty() && !o.control;
    const absl::Time start = absl::Now();
    const std::string out = RunWorld(o, world, with_fsdp);
    std::cerr << "W=" << world << ": "
              << absl::FormatDuration(
                     absl::Trunc(absl::Now() - start, absl::Milliseconds(100)))
              << "\n";
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() == 14 && f[0] == "ROW") {
        const std::string& op = f[1];
        int w = 0;
        int64_t bytes = 0;
        double ours_med = 0, ours_best = 0, raw_med = 0, raw_best = 0,
               ring_med = 0, ring_best = 0, reps = 0, ratio_paired = 0,
               paired_lo = 0, paired_hi = 0;
        if (!absl::SimpleAtoi(f[2], &w) || !absl::SimpleAtoi(f[3], &bytes) ||
            !absl::SimpleAtod(f[4], &ours_med) ||
            !absl::SimpleAtod(f[5], &ours_best) ||
            !absl::SimpleAtod(f[6], &raw_med) ||
            !absl::SimpleAtod(f[7], &raw_best) ||
            !absl::SimpleAtod(f[8], &ring_med) ||
            !absl::SimpleAtod(f[9], &ring_best) ||
            !absl::SimpleAtod(f[10], &reps) ||
            !absl::SimpleAtod(f[11], &ratio_paired) ||
            !absl::SimpleAtod(f[12], &paired_lo) ||
            !absl::SimpleAtod(f[13], &paired_hi)) {
          Die(absl::StrCat("bad worker line: ", line));
        }
        const double bus = BusFactor(op, w);
        const double ours_busbw = bytes / ours_med * bus / 1e9;
        double gloo_s = raw_med;
        double gloo_busbw = bytes / raw_med * bus / 1e9;
        // Best-of-N: what each achieves with the least interference from
        // the other processes sharing the two cores.
        const double ours_busbw_best = bytes / ours_best * bus / 1e9;
        double gloo_busbw_best = bytes / raw_best * bus / 1e9;
        std::string variant = op == "allreduce"   ? "ring"
                              : op == "broadcast" ? "broadcast"
                              : op == "allgather" ? "allgather"
                                                  : "halving-doubling";
        if (op == "reducescatter" && !o.control) {
          // The ring all-reduce computes the same result (and more): count
          // it by the all-reduce bus bandwidth.
          const double ring_bus = BusFactor("allreduce", w);
          const double ring_busbw = bytes / ring_med * ring_bus / 1e9;
          if (ring_busbw > gloo_busbw) {
            gloo_busbw = ring_busbw;
            gloo_s = ring_med;
            variant = "allreduce ring";
          }
          gloo_busbw_best =
              std::max(gloo_busbw_best, bytes / ring_best * ring_bus / 1e9);
        }
        const bool has_ours = ours_med > 0;  // not --raw_only
        const double ratio = ours_busbw / gloo_busbw;
        const double ratio_best = ours_busbw_best / gloo_busbw_best;
        if (has_ours && bytes >= kMiB) {
          ratios_ge_1mib[op].push_back(ratio_paired);
          ci_hi_ge_1mib[op].push_back(paired_hi);
          best_ratios_ge_1mib[op].push_back(ratio_best);
          median_ratios_ge_1mib[op].push_back(ratio);
        }
        BenchReport::Row row = {{"op", op},
                                {"W", static_cast<double>(w)},
                                {"bytes", static_cast<double>(bytes)},
                                {"size", HumanBytes(bytes)}};
        if (has_ours) {
          row.push_back({"ours_ms", ours_med * 1e3});
          row.push_back({"ours_algbw_GBps", bytes / ours_med / 1e9});
          row.push_back({"ours_busbw_GBps", ours_busbw});
        }
        row.push_back({"gloo_ms", gloo_s * 1e3});
        row.push_back({"gloo_busbw_GBps", gloo_busbw});
        row.push_back({"gloo_variant", variant});
        if (has_ours) {
          row.push_back({"ratio", ratio});
          row.push_back({"ratio_paired", ratio_paired});
          row.push_back({"ratio_paired_ci95_lo", paired_lo});
          row.push_back({"ratio_paired_ci95_hi", paired_hi});
          row.push_back({"ratio_best", ratio_best});
          row.push_back({"ours_best_ms", ours_best * 1e3});
        }
        row.push_back({"gloo_best_ms", raw_best * 1e3});
        row.push_back({"reps", reps});
        if (op == "reducescatter") {
          row.push_back({"gloo_hd_ms", raw_med * 1e3});
          row.push_back({"gloo_ring_allreduce_ms", ring_med * 1e3});
        }
        report.AddRow(std::move(row));
      } else if (f.size() == 7 && f[0] == "FSDP") {
        FsdpRow r;
        if (!absl::SimpleAtoi(f[1], &fsdp_world) ||
            !absl::SimpleAtoi(f[2], &fsdp_total) ||
            !absl::SimpleAtoi(f[3], &r.tensors) ||
            !absl::SimpleAtoi(f[4], &r.per_gather) ||
            !absl::SimpleAtod(f[5], &r.ours_s) ||
            !absl::SimpleAtod(f[6], &r.raw_s)) {
          Die(absl::StrCat("bad worker line: ", line));
        }
        fsdp.push_back(r);
      }
    }
  }
  if (o.control) {
    std::cout << "CONTROL RUN: the ours_* columns are raw Gloo on a second "
                 "context (its own TCP device), not shardd\n";
  }
  std::cout << report.Table() << "\n";

  // Headline: the worst over sizes >= 1 MiB and every W of the median
  // paired ratio (see Worker::RunBlock). Beside it the same worst from median
  // times and from best-of-N times, each side's taken apart from the other's.
  // --control: the same statistics of raw Gloo against itself, named
  // control_<op>_...: what identical code scores on this machine.
  const std::string prefix = o.control ? "control_" : "";
  for (const auto& [op_name, ratios] : ratios_ge_1mib) {
    const std::string op = prefix + op_name;
    report.SetFigure(absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib"),
                     *std::min_element(ratios.begin(), ratios.end()));
    // The lowest upper bound: below 0.9 only if some point is slower than
    // 0.9x Gloo beyond what the noise allows.
    const std::vector<double>& hi = ci_hi_ge_1mib[op_name];
    report.SetFigure(
        absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib_ci95_hi"),
        *std::min_element(hi.begin(), hi.end()));
    const std::vector<double>& by_best = best_ratios_ge_1mib[op_name];
    report.SetFigure(
        absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib_best_times"),
        *std::min_element(by_best.begin(), by_best.end()));
    const std::vector<double>& by_median = median_ratios_ge_1mib[op_name];
    report.SetFigure(
        absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib_median_times"),
        *std::min_element(by_median.begin(), by_median.end()));
    report.SetFigure(absl::StrCat(op, "_busbw_ratio_to_gloo_median_ge_1mib"),
                     Median(by_median));
  }

  if (!fsdp.empty()) {
    BenchReport table("collectives_flat_vs_per_tensor");
    // Ours, or raw Gloo under --raw_only.
    auto time_of = [&](const FsdpRow& r) {
      return o.raw_only ? r.raw_s : r.ours_s;
    };
    const double flat = fsdp_total / time_of(fsdp[0]) / 1e9;
    double crossing = 0;
    for (size_t i = 0; i < fsdp.size(); ++i) {
      const FsdpRow& r = fsdp[i];
      const double gbps = fsdp_total / time_of(r) / 1e9;
      BenchReport::Row row = {
          {"tensors", static_cast<double>(r.tensors)},
          {"bytes_per_gather", static_cast<double>(r.per_gather)},
          {"size", HumanBytes(r.per_gather)}};
      if (!o.raw_only) {
        row.push_back({"ours_ms", r.ours_s * 1e3});
        row.push_back({"ours_algbw_GBps", gbps});
      }
      row.push_back(
          {o.raw_only ? "gloo_vs_flat" : "ours_vs_flat", gbps / flat});
      row.push_back({"gloo_ms", r.raw_s * 1e3});
      row.push_back({"gloo_algbw_GBps", fsdp_total / r.raw_s / 1e9});
      table.AddRow(std::move(row));
      if (crossing == 0 && i > 0 && gbps < flat / 2) {
        // Log-linear interpolation between the last size at or above half
        // the flat throughput and this one.
        const FsdpRow& p = fsdp[i - 1];
        const double g0 = fsdp_total / time_of(p) / 1e9;
        const double x0 = std::log2(static_cast<double>(p.per_gather));
        const double x1 = std::log2(static_cast<double>(r.per_gather));
        const double t = (g0 - flat / 2) / (g0 - gbps);
        crossing = std::exp2(x0 + t * (x1 - x0));
      }
    }
    std::cout << "FSDP flat vs per-tensor all-gather, W=" << fsdp_world
              << ", total " << HumanBytes(fsdp_total) << " (ours: N async "
              << "gathers then wait; gloo: N calls):\n"
              << table.Table() << "\n";
    for (const BenchReport::Row& row : table.rows()) {
      BenchReport::Row r = {{"op", std::string("fsdp_per_tensor_allgather")},
                            {"W", static_cast<double>(fsdp_world)},
                            {"bytes", static_cast<double>(fsdp_total)}};
      r.insert(r.end(), row.begin(), row.end());
      report.AddRow(std::move(r));
    }
    // 0 means it never fell below half within the sizes measured.
    report.SetFigure("per_call_overhead_dominates_below_bytes", crossing);
    report.SetFigure("flat_allgather_algbw_gbps_w4", flat);
    std::string dir = ".";
    if (!o.out.empty() && o.out.find('/') != std::string::npos) {
      dir = o.out.substr(0, o.out.rfind('/'));
    }
    Plot(fsdp, fsdp_world, fsdp_total, flat,
         dir + "/collectives_flat_vs_per_tensor.png");
  }

  std::cout << "figures (busbw ratio ours/gloo over sizes >= 1 MiB and "
               "every W; *_min_ge_1mib: median of per-repetition paired "
               "ratios; *_best_times and *_median_times: from each side's "
               "best-of-N and median times):\n";
  for (const auto& [name, value] : report.figures()) {
    std::cout << "  " << name << " = " << value << "\n";
  }
  if (!o.out.empty()) {
    Check(report.WriteJson(o.out), "write JSON");
    std::cout << "wrote " << o.out << "\n";
  }
  return 0;
}

int Usage(const char* argv0) {
  std::cerr
      << "usage: " << argv0
      << " [--quick] [--raw_only] [--control] [--ops=allgather,reducescatter,"
         "allreduce,broadcast] [--worlds=2,4,8] [--min_bytes=N] "
         "[--max_bytes=N] [--out=PATH]\n";
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
    } else if (arg == "--raw_only") {
      o.raw_only = true;
    } else if (arg == "--control") {
      o.control = true;
    } else if (arg == "--fsdp") {
      o.fsdp = true;
    } else if (absl::StartsWith(arg, "--ops=")) {
      o.ops = absl::StrSplit(arg.substr(6), ',', absl::SkipEmpty());
    } else if (absl::StartsWith(arg, "--worlds=")) {
      for (absl::string_view w :
           absl::StrSplit(arg.substr(9), ',', absl::SkipEmpty())) {
        int world = 0;
        if (!absl::SimpleAtoi(w, &world) || world < 1) {
          return shardd::bench::Usage(argv[0]);
        }
        o.worlds.push_back(world);
      }
    } else if (absl::StartsWith(arg, "--min_bytes=")) {
      if (!absl::SimpleAtoi(arg.substr(12), &o.min_bytes))
        return shardd::bench::Usage(argv[0]);
    } else if (absl::StartsWith(arg, "--max_bytes=")) {
      if (!absl::SimpleAtoi(arg.substr(12), &o.max_bytes))
        return shardd::bench::Usage(argv[0]);
    } else if (absl::StartsWith(arg, "--out=")) {
      o.out = std::string(arg.substr(6));
    } else if (absl::StartsWith(arg, "--store=")) {
      o.store = std::string(arg.substr(8));
    } else if (absl::StartsWith(arg, "--rank=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &o.rank))
        return shardd::bench::Usage(argv[0]);
    } else if (absl::StartsWith(arg, "--size=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &o.size))
        return shardd::bench::Usage(argv[0]);
    } else {
      return shardd::bench::Usage(argv[0]);
    }
  }
  if (o.worker) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // Never outlive the parent.
    if (o.rank < 0 || o.rank >= o.size || o.store.empty()) {
      return shardd::bench::Usage(argv[0]);
    }
    shardd::bench::Worker(o).Run();
    return 0;
  }
  return shardd::bench::RunParent(o);
}
