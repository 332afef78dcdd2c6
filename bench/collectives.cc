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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "bench/collectives_options.h"
#include "bench/collectives_stats.h"
#include "bench/collectives_worker.h"
#include "tests/collectives/process_group.h"

namespace shardd::bench {
namespace {

using collectives::Check;
using collectives::Die;
using collectives::kHalfWidth;
using collectives::kKiB;
using collectives::kMiB;
using collectives::Options;
using collectives::Reps;
using collectives::Sizes;

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
  shardd::bench::collectives::Options o;
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
  if (o.quick && !budget_given)
    o.budget = shardd::bench::collectives::kQuickBudget;
  if (o.raw_only && o.gloo_as_ours) return shardd::bench::Usage(argv[0]);
  if (o.worker) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // Never outlive the parent.
    if (o.rank < 0 || o.rank >= o.size || o.store.empty()) {
      return shardd::bench::Usage(argv[0]);
    }
    shardd::bench::collectives::RunWorker(o);
    return 0;
  }
  return shardd::bench::RunParent(o);
}
