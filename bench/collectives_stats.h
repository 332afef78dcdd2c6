// The statistics of bench/collectives: medians with their confidence
// interval, paired per-repetition ratios, and the bar the benchmark is held
// to (issue #21):
//   - per operation and W, the median over sizes >= 1 MiB of the points'
//     paired ratios is at least 0.97, and
//   - per operation, the worst point (over sizes >= 1 MiB and every W) is no
//     lower than the A/A control's worst point in the same run minus 0.05.
//
//   std::vector<BarPoint> points = ...;  // one per (op, W, size)
//   for (const BarVerdict& v : EvaluateBar(points, BarRule())) {
//     std::cout << BarSummaryLine(v) << "\n";
//   }
//
// Pure functions, no I/O; thread-safe.

#ifndef SHARDD_BENCH_COLLECTIVES_STATS_H_
#define SHARDD_BENCH_COLLECTIVES_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardd::bench {

// The median of `v` (the mean of the middle two for an even count); 0 for an
// empty `v`.
double Median(std::vector<double> v);

// A median with its distribution-free 95% confidence interval: the order
// statistics n/2 -+ 0.98 sqrt(n) (the binomial(n, 1/2) normal
// approximation), clamped to the sample. All zero for an empty sample.
struct MedianCi {
  double median = 0;
  double lo = 0;
  double hi = 0;
};
MedianCi MedianWithCi(std::vector<double> v);

// Per repetition i, numerator[i] * scale / denominator[i]: with times, the
// denominator's speed relative to the numerator's when scale is 1. Pairs
// whose denominator is not positive (a side that did not run) are left out;
// pairs beyond the shorter vector too.
std::vector<double> PairedRatios(const std::vector<double>& numerator,
                                 const std::vector<double>& denominator,
                                 double scale = 1.0);

// One measured (operation, W, size) point: the median paired ratio of ours
// against Gloo and of the A/A control (raw Gloo against raw Gloo on a second
// context) measured in the same repetitions.
struct BarPoint {
  std::string op;
  int world = 0;
  int64_t bytes = 0;
  double ratio = 0;
  double control_ratio = 0;
};

struct BarRule {
  // Points below this size do not count (per-call overhead dominates them).
  int64_t min_bytes = int64_t{1} << 20;
  // Each W's median over sizes >= min_bytes must reach this.
  double median_at_least = 0.97;
  // The worst point may sit this far below the control's worst point.
  double control_margin = 0.05;
};

// Where a point sits: its W and size.
struct PointAt {
  int world = 0;
  int64_t bytes = 0;
  double ratio = 0;
};

// The bar's verdict for one operation.
struct BarVerdict {
  std::string op;
  // Per W: the median over sizes >= min_bytes of the points' ratios.
  std::map<int, double> median_by_world;
  std::map<int, double> control_median_by_world;
  // The lowest point over sizes >= min_bytes and every W, of ours and of the
  // control (each where it fell).
  PointAt worst;
  PointAt control_worst;
  // worst.ratio - control_worst.ratio; passes at >= -control_margin.
  double worst_minus_control_worst = 0;
  bool median_pass = false;
  bool worst_pass = false;
  bool pass = false;
  // What failed, one phrase each, e.g. "median 0.95 < 0.97 at W = 4" or
  // "worst 0.80 (W = 2, 4 MiB) < control worst 0.90 - 0.05". Every point
  // below the worst-point bound is named.
  std::vector<std::string> failures;
};

// One verdict per operation that has points at >= rule.min_bytes, ordered by
// operation name. Points below rule.min_bytes are ignored.
std::vector<BarVerdict> EvaluateBar(const std::vector<BarPoint>& points,
                                    const BarRule& rule);

// "reducescatter: PASS (...)" or "reducescatter: FAIL: <failures>; (...)",
// with every W's median and both worst points.
std::string BarSummaryLine(const BarVerdict& verdict, const BarRule& rule);

// The order in which `sides` timed sides (0 .. sides-1) run in repetition
// `repetition`: a Williams design, so that over every cycle of
// BalancedOrderCycle(sides) repetitions each side runs in each position
// equally often and runs right after each other side equally often. Order
// effects (caches, TCP windows, the scheduler's state one side leaves the
// next) then fall on every side alike; plain ABBA does that for two sides
// only. sides >= 1.
std::vector<int> BalancedOrder(int sides, int64_t repetition);
// sides for an even count, 2 * sides for an odd one.
int BalancedOrderCycle(int sides);

// "4 KiB", "16 MiB": whole binary units, as the tables print sizes.
std::string HumanBytes(int64_t bytes);

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_COLLECTIVES_STATS_H_
