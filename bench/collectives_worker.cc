// bench/collectives' worker; see collectives.cc for what it measures.
#include "bench/collectives_worker.h"

#include <stdlib.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

namespace shardd::bench::collectives {
namespace {

using comm::Collective;
using comm::OpOptions;
using comm::ReduceOp;
using core::DType;

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

}  // namespace

void RunWorker(const Options& options) { Worker(options).Run(); }

}  // namespace shardd::bench::collectives
