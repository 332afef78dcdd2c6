// bench/collectives: our GlooCollective against raw Gloo called directly, in
// the same processes and the same run, over W processes on 127.0.0.1, with
// an A/A control (raw Gloo against raw Gloo) measured in the same
// repetitions.
//
// The parent spawns W copies of this binary (--worker) for each W. Every
// worker forms its communicators through a shared temporary directory: ours
// (CreateGlooCollective over a FileStore) and raw gloo::rendezvous::Contexts
// (gloo's FileStore), each with its own TCP device: Gloo's side, the
// control's (set up as ours is), Gloo's ring all-reduce and one for barriers
// (Worker::Connect). Buffers are allocated once per worker, at the largest
// size, and pre-faulted (first touch is very slow on these VMs); every
// operation reuses them.
//
// Operations (fp32, sum): all-gather, reduce-scatter, all-reduce and
// broadcast (root 0), for sizes 4 KiB .. 256 MiB in powers of 4 and W = 2,
// 4, 8 (--quick: the points the bar looks at up to 16 MiB, 1, 4 and 16
// MiB, at W = 2 and 4). Size = the whole buffer (all-gather output,
// reduce-scatter input), bandwidths by the nccl-tests convention:
//   algbw = size / time;
//   busbw = algbw * (W-1)/W  for all-gather and reduce-scatter,
//           algbw * 2(W-1)/W for all-reduce, algbw for broadcast.
// Raw Gloo counterparts: gloo::allgather, gloo::allreduce (ring),
// gloo::broadcast; for reduce-scatter the best Gloo offers for the same
// result, measured both ways in the same repetitions and one kept per point
// (the faster by the median of their paired ratio):
// ReduceScatterHalvingDoubling (the old-style algorithm, set up once per
// size outside the timing) and a ring all-reduce of the whole input (which
// contains the scattered result) at its whole time: what a Gloo user pays
// for the scattered result either way. Half the ring all-reduce's time (its
// reduce-scatter phase, were it a call of its own) is reported beside it,
// for ours and for Gloo's halving-doubling, but is not the bar's
// reference: it holds half the all-reduce's per-call cost and, at W = 2,
// all of its additions overlap the other half's transfers, which no
// reduce-scatter call can do (Gloo's own scores 0.76-0.95 against it on a
// loaded 2-core VM). The
// control runs the same Gloo call as Gloo's side on a context of its own
// (reduce-scatter: both ways, each against its own control; the point's
// control is the one of the way Gloo's side uses).
//
// Timing: each repetition starts after a raw Gloo barrier; a repetition's
// time is the slowest rank's. After warm-up, a repetition runs ours, Gloo,
// the control (and for reduce-scatter Gloo's ring all-reduce and its
// control) once each, in a balanced order (BalancedOrder: each side in each
// position, and right after each other side, equally often over a cycle).
// The ratios are PAIRED: per repetition, Gloo's time over ours (as busbw),
// and Gloo's time over the control's, then the median over repetitions, so
// that what the shared two cores are doing at one moment weighs on both
// sides of a pair alike. Repetitions come in blocks (24 up to 4 MiB, 12 to
// 64 MiB, 6 at 256 MiB) until both medians' 95% confidence intervals are
// within +-0.05 or a cap is reached (300, 120 at 16 MiB, 36 at 64 MiB, 12);
// the intervals are in the JSON. The blocks of all points of one W are
// interleaved (a round runs one block of every unfinished point), so each
// point's repetitions are spread over the run: the machine drifts over
// minutes, and a slow spell then weighs on every point alike instead of on
// whichever point it hit.
//
// --gloo_as_ours (calibration): ours' side runs raw Gloo on a context of
// its own, so every figure of ours becomes a second A/A control; the bar's
// verdicts then say how often it fails code identical to Gloo's by chance
// (docs/benchmarks.md has the counts).
//
// --quick measures exactly as the full run does (the same blocks, warm-up,
// balanced order, pairing, interleaving and stopping rule) at a subset of
// its points, and starts no new round once 15 s have passed at a W
// (--budget_s): every point runs at least one block, and the JSON says how
// many repetitions each got. It used to take fewer repetitions per block
// and per point than the full run, which made its medians differ from the
// full run's by more than the noise (a reduce-scatter median of 0.64
// against about 1.0).
//
// The bar (bench/collectives_stats.h), printed with PASS/FAIL per operation
// by every run, --quick too: per operation and W the median over sizes
// >= 1 MiB of the points' paired ratios >= 0.97
// (<op>_median_ratio_ge_1mib_w<W>), and the worst point over sizes >= 1 MiB
// and every W (<op>_busbw_ratio_to_gloo_min_ge_1mib) no lower than the
// control's worst point (control_<op>_busbw_ratio_to_gloo_min_ge_1mib) minus
// 0.05 (<op>_worst_minus_control_worst >= -0.05). The table reports each
// side's MEDIAN time; ratios from each side's best-of-N and median times
// are in the JSON too.
//
// FSDP observation (W = 4): the same total (64 MiB; --quick 16 MiB)
// all-gathered as one flat buffer or as N per-tensor gathers of total/N
// bytes (N = 1 .. 1024 in powers of 2; --quick 1, 4, 16, 64; ours issued
// back to back asynchronously and then
// waited for, raw Gloo called N times); the figure
// per_call_overhead_dominates_below_bytes is the per-gather size at which
// ours falls to half of the flat throughput (interpolated log-linearly
// between the measured sizes), and bench/results/
// collectives_flat_vs_per_tensor.png plots it (gnuplot).
//
// Run time on the 2-core VM: --quick 45 s at load 11-16 (W = 2 15-22 s,
// W = 4 21-28 s, then the FSDP table; it was 2.5-6 minutes); the full run
// 16 minutes for W = 2 and 4 at load 10-17 plus W = 8, depending on the
// load (W = 8 on 2 cores is slow, and 256 MiB at W = 8 needs ~2.2 GiB per
// process: 17 GiB in all).
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
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "bench/collectives_stats.h"
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
  // Calibration: ours' side runs raw Gloo too, on a context of its own set
  // up as ours is, so that every ratio of ours becomes a second A/A
  // control: what the bar reads for code identical to Gloo's (how often
  // it fails by chance).
  bool gloo_as_ours = false;
  // Only these operations / world sizes (empty: all), for looking into one
  // point without the whole run.
  std::vector<std::string> ops;
  std::vector<int> worlds;
  int64_t min_bytes = 0;
  int64_t max_bytes = 0;  // 0: no bound.
  // Per W, no new round of blocks starts once this much time has passed
  // (every point has run one block by then); 0: none. --quick: kQuickBudget.
  absl::Duration budget = absl::ZeroDuration();
};

// --quick's time per W for the points after their first block.
constexpr absl::Duration kQuickBudget = absl::Seconds(15);

[[noreturn]] void Die(absl::string_view message) {
  std::cerr << "bench/collectives: " << message << std::endl;
  std::exit(1);
}

void Check(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) Die(absl::StrCat(what, ": ", status.ToString()));
}

// 4 KiB .. 256 MiB in powers of 4 (--quick: 1 .. 16 MiB, where the bar
// looks), within [min, max] (0: no bound).
std::vector<int64_t> Sizes(bool quick, int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t s = quick ? kMiB : 4 * kKiB;
       s <= (quick ? 16 * kMiB : 256 * kMiB); s *= 4) {
    if (s >= min_bytes && (max_bytes == 0 || s <= max_bytes)) {
      sizes.push_back(s);
    }
  }
  return sizes;
}

// Repetitions per block of one point (after warm-up), the same in both
// modes (--quick once took 8-16 per block where the full run took 30-60,
// and had other medians): small enough that one round over every point of
// a W stays within seconds, so that rounds interleave finely and --quick's
// budget leaves each point a few of them. BalancedOrder continues across a
// point's blocks (it counts the point's repetitions), so the block size
// does not unbalance the order.
int Reps(int64_t bytes) {
  if (bytes <= 4 * kMiB) return 24;
  if (bytes <= 64 * kMiB) return 12;
  return 6;
}

// The most repetitions one point may take while its paired ratio is still
// uncertain (cheap sizes can afford many).
int MaxReps(int64_t bytes) {
  if (bytes <= 4 * kMiB) return 300;
  if (bytes <= 16 * kMiB) return 120;
  if (bytes <= 64 * kMiB) return 36;
  return 12;
}

// Target precision of a point's paired ratio: +-0.05 at 95%.
constexpr double kHalfWidth = 0.05;

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
    // The FSDP table gathers its whole total into the same buffers, however
    // low --max_bytes is.
    const int64_t fsdp_total = o_.quick ? 16 * kMiB : 64 * kMiB;
    const int64_t max_bytes =
        o_.fsdp ? std::max(sizes.back(), fsdp_total) : sizes.back();
    a_ = std::make_unique<Buffer>(max_bytes);
    b_ = std::make_unique<Buffer>(max_bytes);
    SyncBarrier();
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
    // --quick: no new round once its budget is spent, decided on the
    // slowest rank's clock so that every rank stops at the same round.
    const auto start = std::chrono::steady_clock::now();
    for (bool unfinished = true; unfinished;) {
      unfinished = false;
      for (Point& point : points) {
        if (point.done) continue;
        RunBlock(point);
        unfinished = true;
      }
      if (unfinished && o_.budget > absl::ZeroDuration()) {
        std::vector<double> elapsed = {
            std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                          start)
                .count()};
        MaxOverRanks(elapsed);
        if (elapsed[0] >= absl::ToDoubleSeconds(o_.budget)) break;
      }
    }
    if (rank_ == 0) {
      for (const Point& point : points) PrintRow(point);
    }
    if (o_.fsdp) FlatVsPerTensor(fsdp_total);
    SyncBarrier();
    ours_.reset();
  }

 private:
  void Connect() {
    if (o_.gloo_as_ours) {
      gloo_ours_ = RawContext("ours");
    } else if (!o_.raw_only) {
      ConnectOurs();
    }
    // Every raw Gloo use has a context of its own (its own TCP device, with
    // its event-loop thread, and its own store), as ours has: Gloo's side;
    // the A/A control's second side, set up as ours is; Gloo's ring
    // all-reduce, the other way of its reduce-scatter; and barriers and the
    // max over ranks. No timed side then shares a device with another's
    // traffic: while Gloo's halving-doubling shared one with the ring
    // all-reduce, the A/A control of reduce-scatter (halving-doubling on a
    // device of its own against it) read 1.05-1.11 per W instead of 1.
    raw_ = RawContext("raw");
    ring_ = RawContext("ring");
    sync_ = RawContext("sync");
    if (!o_.raw_only) {
      ctrl_ = RawContext("ctrl");
      ctrl_ring_ = RawContext("ctrlring");
    }
  }

  std::shared_ptr<gloo::Context> RawContext(absl::string_view name) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(absl::StrCat(o_.store, "/", name));
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
    context->setTimeout(std::chrono::seconds(300));
    context->connectFullMesh(store, device);
    return context;
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

  void SyncBarrier() {
    gloo::BarrierOptions opts(sync_);
    gloo::barrier(opts);
  }

  // Runs `fn` after a barrier; returns this rank's seconds.
  template <typename Fn>
  double TimeOne(Fn&& fn) {
    SyncBarrier();
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }

  // Element-wise max over ranks (each repetition's slowest rank).
  void MaxOverRanks(std::vector<double>& v) {
    if (v.empty()) return;
    gloo::AllreduceOptions opts(sync_);
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
    // The same on the control's context, and on ours' under --gloo_as_ours.
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> ctrl_rshd,
        ours_rshd;
    // Per repetition, each rank's slowest: ours, raw Gloo, the control (raw
    // Gloo on the second context) and, for reduce-scatter, Gloo's ring
    // all-reduce of the whole input and its control (the same on a context
    // of its own).
    std::vector<double> t_ours, t_raw, t_ctrl, t_ring, t_ctrl_ring;
    // Reduce-scatter: Gloo's side is its ring all-reduce (else its
    // halving-doubling reduce-scatter).
    bool ring_side = false;
    // Median paired ratios (busbw, ours / Gloo and control / Gloo).
    MedianCi ci, ctrl_ci;
    bool done = false;
  };

  Point MakePoint(const std::string& op, int64_t bytes) {
    Point point;
    point.op = op;
    point.bytes = bytes;
    if (op == "reducescatter") {
      const int64_t n = bytes / 4;
      const auto make = [&](const std::shared_ptr<gloo::Context>& context) {
        return std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
            context, std::vector<float*>{b_->data()}, static_cast<int>(n),
            std::vector<int>(world_, static_cast<int>(n / world_)));
      };
      point.rshd = make(raw_);
      if (!o_.raw_only) point.ctrl_rshd = make(ctrl_);
      if (o_.gloo_as_ours) point.ours_rshd = make(gloo_ours_);
    }
    return point;
  }

  // Warm-up, then one block of repetitions of `point`; marks it done once
  // its median paired ratio and the control's are known to +-kHalfWidth
  // (95%) or it has run its most repetitions. The buffers hold zeros
  // throughout (Buffer), which keeps repeated in-place reductions finite.
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
    // Raw Gloo's side on one context: `raw_`, or the control's `ctrl_`.
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
      if (o_.gloo_as_ours) {
        gloo_on(gloo_ours_, point.ours_rshd.get());
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
    auto ctrl = [&] { gloo_on(ctrl_, point.ctrl_rshd.get()); };
    // Reduce-scatter only: Gloo's other way to the same result, and its
    // control.
    auto raw_ring = [&] { RawAllreduce(ring_, b, n); };
    auto ctrl_ring = [&] { RawAllreduce(ctrl_ring_, b, n); };
    // Ours and the controls run unless --raw_only.
    const bool sides = !o_.raw_only;
    const bool ring_timed = op == "reducescatter";

    // Every block starts warm: the point before it left other sizes in the
    // caches and TCP windows.
    const int warmup = bytes <= kMiB ? 2 : 1;
    for (int i = 0; i < warmup; ++i) {
      if (sides) TimeOne(ours);
      TimeOne(raw);
      if (sides) TimeOne(ctrl);
      if (ring_timed) TimeOne(raw_ring);
      if (ring_timed && sides) TimeOne(ctrl_ring);
    }
    const int block = Reps(bytes);
    const int max_reps = MaxReps(bytes);
    // The timed sides of this point and where each one's times go.
    std::vector<std::function<void()>> run;
    std::vector<std::vector<double>*> times;
    std::vector<double> bo(block), br(block), bc(block), bg(block), bh(block);
    if (sides) {
      run.push_back(ours);
      times.push_back(&bo);
    }
    run.push_back(raw);
    times.push_back(&br);
    if (sides) {
      run.push_back(ctrl);
      times.push_back(&bc);
    }
    if (ring_timed) {
      run.push_back(raw_ring);
      times.push_back(&bg);
    }
    if (ring_timed && sides) {
      run.push_back(ctrl_ring);
      times.push_back(&bh);
    }
    const int n_sides = static_cast<int>(run.size());
    for (int i = 0; i < block; ++i) {
      // A balanced order (BalancedOrder): every side runs in every position
      // and right after every other side equally often, so that the pairs
      // (ours, Gloo) and (control, Gloo) see the same order effects. ABBA
      // does that for two sides only: over four, the control would always
      // follow Gloo's ring all-reduce and Gloo never would.
      const int64_t rep = static_cast<int64_t>(point.t_raw.size()) + i;
      for (int side : BalancedOrder(n_sides, rep)) {
        (*times[side])[i] = TimeOne(run[side]);
      }
    }
    MaxOverRanks(bo);
    MaxOverRanks(br);
    MaxOverRanks(bc);
    MaxOverRanks(bg);
    MaxOverRanks(bh);
    point.t_ours.insert(point.t_ours.end(), bo.begin(), bo.end());
    point.t_raw.insert(point.t_raw.end(), br.begin(), br.end());
    point.t_ctrl.insert(point.t_ctrl.end(), bc.begin(), bc.end());
    point.t_ring.insert(point.t_ring.end(), bg.begin(), bg.end());
    point.t_ctrl_ring.insert(point.t_ctrl_ring.end(), bh.begin(), bh.end());
    // For reduce-scatter Gloo's side is one of its two ways, the same in
    // every repetition: its halving-doubling reduce-scatter, or its ring
    // all-reduce (which contains the scattered result) at its whole time.
    // The faster by the median of
    // their paired ratio, repetition by repetition: the ratio of their two
    // medians swung between them from run to run at 32 repetitions. Taking
    // the faster of the two in each repetition would hand Gloo the luckier
    // of two noisy samples.
    if (ring_timed) {
      point.ring_side = Median(PairedRatios(point.t_raw, point.t_ring)) > 1;
    }
    const int reps = static_cast<int>(point.t_raw.size());
    const bool capped = reps + block > max_reps;
    if (!sides) {  // --raw_only: one block, nothing to pair.
      point.done = true;
      return;
    }
    // Paired: each repetition's Gloo time over ours in the SAME repetition
    // (they ran back to back), as a bus-bandwidth ratio. What the shared
    // machine is doing at that moment weighs on both sides of one pair
    // alike. The control: Gloo's time over the control's, the same way and
    // the same call as Gloo's side (reduce-scatter: halving-doubling against
    // halving-doubling, or ring all-reduce against ring all-reduce, by
    // Gloo's way): what identical code scores against that side. (It was
    // halving-doubling even where Gloo's side was its ring all-reduce.)
    point.ci =
        MedianWithCi(point.ring_side ? PairedRatios(point.t_ring, point.t_ours)
                                     : PairedRatios(point.t_raw, point.t_ours));
    point.ctrl_ci = MedianWithCi(
        point.ring_side ? PairedRatios(point.t_ring, point.t_ctrl_ring)
                        : PairedRatios(point.t_raw, point.t_ctrl));
    const auto precise = [](const MedianCi& ci) {
      return ci.hi - ci.lo <= 2 * kHalfWidth;
    };
    point.done = (precise(point.ci) && precise(point.ctrl_ci)) || capped;
  }

  // Reduce-scatter: Gloo's own reduce-scatter (halving-doubling) scored
  // like ours against its ring all-reduce at half its time (the median
  // paired ratio); 0 for the other operations. Informative: see the file
  // comment for why half an all-reduce is not the bar's reference.
  static double HalvingAgainstRingHalf(const Point& point) {
    if (point.t_ring.empty()) return 0;
    return Median(PairedRatios(point.t_ring, point.t_raw, 0.5));
  }
  // The same for ours.
  static double OursAgainstRingHalf(const Point& point) {
    if (point.t_ring.empty() || point.t_ours.empty()) return 0;
    return Median(PairedRatios(point.t_ring, point.t_ours, 0.5));
  }

  // One line per point for the parent (rank 0 only): medians and bests of
  // every side's times, the repetitions, both paired ratios with their
  // intervals, and Gloo's reduce-scatter way.
  void PrintRow(const Point& point) {
    const auto min = [](const std::vector<double>& v) {
      return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
    };
    // The control of Gloo's side.
    const std::vector<double>& control =
        point.ring_side ? point.t_ctrl_ring : point.t_ctrl;
    std::cout << "ROW " << point.op << " " << world_ << " " << point.bytes
              << " " << Median(point.t_ours) << " " << min(point.t_ours) << " "
              << Median(point.t_raw) << " " << min(point.t_raw) << " "
              << Median(point.t_ring) << " " << min(point.t_ring) << " "
              << point.t_raw.size() << " " << point.ci.median << " "
              << point.ci.lo << " " << point.ci.hi << " " << Median(control)
              << " " << min(control) << " " << point.ctrl_ci.median << " "
              << point.ctrl_ci.lo << " " << point.ctrl_ci.hi << " "
              << (point.ring_side ? 1 : 0) << " "
              << HalvingAgainstRingHalf(point) << " "
              << OursAgainstRingHalf(point) << std::endl;
  }

  void FlatVsPerTensor(int64_t total) {
    float* a = a_->data();
    float* b = b_->data();
    // --quick: every other N up to 64 (per gather 16 MiB .. 256 KiB, which
    // still brackets the crossing, about 1-5 MB here) and 2 repetitions.
    const int max_n = o_.quick ? 64 : 1024;
    const int step = o_.quick ? 4 : 2;
    for (int tensors = 1; tensors <= max_n; tensors *= step) {
      const int64_t per_gather = total / tensors;  // bytes of one output
      const int64_t shard = per_gather / 4 / world_;
      const std::vector<int64_t> counts(world_, shard);
      auto ours = [&] {
        if (o_.gloo_as_ours) {
          for (int t = 0; t < tensors; ++t) {
            RawAllgather(gloo_ours_, a + t * shard, b + t * shard * world_,
                         shard);
          }
          return;
        }
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
      const int reps = o_.quick ? 2 : 5;
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
  // Raw Gloo contexts (Connect); each holds its TCP device.
  std::shared_ptr<gloo::Context> raw_, ring_, sync_, ctrl_, ctrl_ring_;
  // Ours' side under --gloo_as_ours (instead of ours_).
  std::shared_ptr<gloo::Context> gloo_ours_;
  std::unique_ptr<Buffer> a_, b_;
};

// ------------------------------------------------------------- parent ---

double BusFactor(const std::string& op, int w) {
  if (op == "allreduce") return 2.0 * (w - 1) / w;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(w - 1) / w;
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
  for (const char* sub :
       {"/ours", "/raw", "/ring", "/ctrl", "/ctrlring", "/sync"}) {
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
    if (o.gloo_as_ours) argv.push_back("--gloo_as_ours");
    if (!o.ops.empty()) {
      argv.push_back(absl::StrCat("--ops=", absl::StrJoin(o.ops, ",")));
    }
    argv.push_back(absl::StrCat("--min_bytes=", o.min_bytes));
    argv.push_back(
        absl::StrCat("--budget_s=", absl::ToDoubleSeconds(o.budget)));
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
  // Per operation over sizes >= 1 MiB and every W: the points' median
  // paired ratios, the upper ends of their intervals, and the ratios from
  // best-of-N and from median times.
  std::map<std::string, std::vector<double>> ratios_ge_1mib;
  std::map<std::string, std::vector<double>> median_ratios_ge_1mib;
  std::map<std::string, std::vector<double>> best_ratios_ge_1mib;
  std::map<std::string, std::vector<double>> ci_hi_ge_1mib;
  std::map<std::string, std::vector<double>> ctrl_ci_hi_ge_1mib;
  std::vector<BarPoint> bar_points;
  // Reduce-scatter, per W over sizes >= 1 MiB: Gloo's halving-doubling
  // against its ring all-reduce at half its time.
  std::map<int, std::vector<double>> hd_by_world;
  std::map<int, std::vector<double>> ours_half_by_world;
  std::vector<FsdpRow> fsdp;
  int64_t fsdp_total = 0;
  int fsdp_world = 0;
  // Which points this run covers, up front (--quick is a subset of the
  // full run's points, measured the same way).
  std::vector<std::string> size_names;
  for (int64_t bytes : Sizes(o.quick, o.min_bytes, o.max_bytes)) {
    size_names.push_back(HumanBytes(bytes));
  }
  std::cout << "points: W = " << absl::StrJoin(worlds, ", ") << "; sizes "
            << absl::StrJoin(size_names, ", ") << "; "
            << (o.ops.empty() ? std::string("every operation")
                              : absl::StrJoin(o.ops, ", "))
            << "; blocks of " << Reps(kMiB) << "/" << Reps(16 * kMiB) << "/"
            << Reps(256 * kMiB)
            << " repetitions (<= 4 MiB / 16-64 MiB / 256 MiB) in interleaved "
               "rounds until the paired ratios are known to +-"
            << kHalfWidth << " or their cap";
  if (o.budget > absl::ZeroDuration()) {
    std::cout << ", no new round after " << absl::FormatDuration(o.budget)
              << " per W";
  }
  std::cout << (o.quick ? " (--quick: the full run's procedure at its "
                          "points of 1-16 MiB, W = 2 and 4)"
                        : "")
            << "\n";
  if (o.gloo_as_ours) {
    std::cout << "--gloo_as_ours: CALIBRATION, 'ours' below is raw Gloo on a "
                 "context of its own; a FAIL is the bar failing code "
                 "identical to Gloo's\n";
    report.SetFigure("gloo_as_ours", 1);
  }
  for (int world : worlds) {
    const bool with_fsdp = world == 4 && o.ops.empty();
    const absl::Time start = absl::Now();
    const std::string out = RunWorld(o, world, with_fsdp);
    std::cerr << "W=" << world << ": "
              << absl::FormatDuration(
                     absl::Trunc(absl::Now() - start, absl::Milliseconds(100)))
              << "\n";
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() == 22 && f[0] == "ROW") {
        const std::string& op = f[1];
        int w = 0;
        int64_t bytes = 0;
        double ours_med = 0, ours_best = 0, raw_med = 0, raw_best = 0,
               ring_med = 0, ring_best = 0, reps = 0, ratio_paired = 0,
               paired_lo = 0, paired_hi = 0, ctrl_med = 0, ctrl_best = 0,
               ctrl_paired = 0, ctrl_lo = 0, ctrl_hi = 0, ring_side = 0,
               hd_to_ring_half = 0, ours_to_ring_half = 0;
        bool parsed =
            absl::SimpleAtoi(f[2], &w) && absl::SimpleAtoi(f[3], &bytes);
        double* const numbers[] = {
            &ours_med,        &ours_best,        &raw_med,  &raw_best,
            &ring_med,        &ring_best,        &reps,     &ratio_paired,
            &paired_lo,       &paired_hi,        &ctrl_med, &ctrl_best,
            &ctrl_paired,     &ctrl_lo,          &ctrl_hi,  &ring_side,
            &hd_to_ring_half, &ours_to_ring_half};
        for (size_t i = 0; i < std::size(numbers); ++i) {
          parsed = parsed && absl::SimpleAtod(f[4 + i], numbers[i]);
        }
        if (!parsed) Die(absl::StrCat("bad worker line: ", line));
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
        if (op == "reducescatter" && ring_side != 0) {
          // The ring all-reduce computes the same result (and more), at
          // its whole time. The worker chose it for the point
          // (Worker::RunBlock); every column follows its choice.
          gloo_busbw = bytes / ring_med * bus / 1e9;
          gloo_s = ring_med;
          gloo_busbw_best = bytes / ring_best * bus / 1e9;
          variant = "allreduce ring";
        }
        const bool has_ours = ours_med > 0;  // not --raw_only
        const double ratio = ours_busbw / gloo_busbw;
        const double ratio_best = ours_busbw_best / gloo_busbw_best;
        if (has_ours) {
          bar_points.push_back({op, w, bytes, ratio_paired, ctrl_paired});
        }
        if (has_ours && bytes >= kMiB) {
          ratios_ge_1mib[op].push_back(ratio_paired);
          ci_hi_ge_1mib[op].push_back(paired_hi);
          ctrl_ci_hi_ge_1mib[op].push_back(ctrl_hi);
          best_ratios_ge_1mib[op].push_back(ratio_best);
          median_ratios_ge_1mib[op].push_back(ratio);
          if (op == "reducescatter") {
            hd_by_world[w].push_back(hd_to_ring_half);
            ours_half_by_world[w].push_back(ours_to_ring_half);
          }
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
          row.push_back({"control_ratio_paired", ctrl_paired});
          row.push_back({"control_ratio_paired_ci95_lo", ctrl_lo});
          row.push_back({"control_ratio_paired_ci95_hi", ctrl_hi});
          row.push_back({"ratio_best", ratio_best});
          row.push_back({"ours_best_ms", ours_best * 1e3});
        }
        row.push_back({"gloo_best_ms", raw_best * 1e3});
        if (has_ours) {
          row.push_back({"control_ms", ctrl_med * 1e3});
          row.push_back({"control_best_ms", ctrl_best * 1e3});
        }
        row.push_back({"reps", reps});
        if (op == "reducescatter") {
          row.push_back({"gloo_hd_ms", raw_med * 1e3});
          row.push_back({"gloo_ring_allreduce_ms", ring_med * 1e3});
          // Gloo's halving-doubling reduce-scatter against its ring
          // all-reduce at half its time, paired like ours.
          row.push_back({"gloo_hd_ratio_to_allreduce_half", hd_to_ring_half});
          row.push_back({"ours_ratio_to_allreduce_half", ours_to_ring_half});
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
  std::cout << report.Table() << "\n";

  // The worst over sizes >= 1 MiB and every W of the median paired ratio
  // (see Worker::RunBlock), of ours and of the control measured in the same
  // repetitions (control_<op>_...: what identical code scores on this
  // machine). Beside it the same worst from median times and from best-of-N
  // times, each side's taken apart from the other's.
  for (const auto& [op, ratios] : ratios_ge_1mib) {
    const auto min_of = [](const std::vector<double>& v) {
      return *std::min_element(v.begin(), v.end());
    };
    report.SetFigure(absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib"),
                     min_of(ratios));
    // The lowest upper bound: low only if some point is slow beyond what
    // the noise allows.
    report.SetFigure(
        absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib_ci95_hi"),
        min_of(ci_hi_ge_1mib[op]));
    report.SetFigure(absl::StrCat("control_", op,
                                  "_busbw_ratio_to_gloo_min_ge_1mib_ci95_hi"),
                     min_of(ctrl_ci_hi_ge_1mib[op]));
    report.SetFigure(
        absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib_best_times"),
        min_of(best_ratios_ge_1mib[op]));
    const std::vector<double>& by_median = median_ratios_ge_1mib[op];
    report.SetFigure(
        absl::StrCat(op, "_busbw_ratio_to_gloo_min_ge_1mib_median_times"),
        min_of(by_median));
    report.SetFigure(absl::StrCat(op, "_busbw_ratio_to_gloo_median_ge_1mib"),
                     Median(by_median));
  }

  // Informative: Gloo's own reduce-scatter and ours against half a ring
  // all-reduce (see the file comment).
  for (const auto& [w, ratios] : hd_by_world) {
    report.SetFigure(
        absl::StrCat("gloo_hd_reducescatter_median_ratio_to_allreduce_half_"
                     "ge_1mib_w",
                     w),
        Median(ratios));
  }
  for (const auto& [w, ratios] : ours_half_by_world) {
    report.SetFigure(
        absl::StrCat("reducescatter_median_ratio_to_allreduce_half_ge_1mib_w",
                     w),
        Median(ratios));
  }

  // The bar (issue #21; bench/collectives_stats.h): per operation and W the
  // median paired ratio over sizes >= 1 MiB, and the worst point against
  // the control's worst point of the same run.
  const BarRule rule;
  std::vector<std::string> summary;
  for (const BarVerdict& v : EvaluateBar(bar_points, rule)) {
    for (const auto& [w, median] : v.median_by_world) {
      report.SetFigure(absl::StrCat(v.op, "_median_ratio_ge_1mib_w", w),
                       median);
      report.SetFigure(
          absl::StrCat("control_", v.op, "_median_ratio_ge_1mib_w", w),
          v.control_median_by_world.at(w));
    }
    report.SetFigure(
        absl::StrCat("control_", v.op, "_busbw_ratio_to_gloo_min_ge_1mib"),
        v.control_worst.ratio);
    report.SetFigure(absl::StrCat(v.op, "_worst_minus_control_worst"),
                     v.worst_minus_control_worst);
    report.SetFigure(absl::StrCat(v.op, "_bar_pass"), v.pass ? 1 : 0);
    summary.push_back(BarSummaryLine(v, rule));
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
               "best-of-N and median times; control_*: raw Gloo against "
               "raw Gloo in the same repetitions; *_median_ratio_ge_1mib_w<W>: "
               "median over sizes >= 1 MiB at that W):\n";
  for (const auto& [name, value] : report.figures()) {
    std::cout << "  " << name << " = " << value << "\n";
  }
  std::cout << "bar: per operation and W the median paired ratio over sizes "
               ">= 1 MiB >= "
            << rule.median_at_least
            << ", and the worst point >= the control's worst - "
            << rule.control_margin << ":\n";
  for (const std::string& line : summary) std::cout << "  " << line << "\n";
  if (!o.out.empty()) {
    Check(report.WriteJson(o.out), "write JSON");
    std::cout << "wrote " << o.out << "\n";
  }
  return 0;
}

int Usage(const char* argv0) {
  std::cerr << "usage: " << argv0
            << " [--quick] [--raw_only] [--gloo_as_ours]"
               " [--ops=allgather,reducescatter,"
               "allreduce,broadcast] [--worlds=2,4,8] [--min_bytes=N] "
               "[--max_bytes=N] [--budget_s=SECONDS per W] [--out=PATH]\n";
  return 2;
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  shardd::bench::Options o;
  bool budget_given = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--worker") {
      o.worker = true;
    } else if (arg == "--raw_only") {
      o.raw_only = true;
    } else if (arg == "--gloo_as_ours") {
      o.gloo_as_ours = true;
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
    } else if (absl::StartsWith(arg, "--budget_s=")) {
      double seconds = 0;
      if (!absl::SimpleAtod(arg.substr(11), &seconds) || seconds < 0)
        return shardd::bench::Usage(argv[0]);
      o.budget = absl::Seconds(seconds);
      budget_given = true;
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
  if (o.quick && !budget_given) o.budget = shardd::bench::kQuickBudget;
  if (o.raw_only && o.gloo_as_ours) return shardd::bench::Usage(argv[0]);
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
