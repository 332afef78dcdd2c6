#include "bench/collectives_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace shardd::bench {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

std::string Where(const PointAt& p) {
  return absl::StrCat("W = ", p.world, ", ", HumanBytes(p.bytes));
}

std::string Fixed(double v) { return absl::StrFormat("%.2f", v); }

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

MedianCi MedianWithCi(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const double half = 0.98 * std::sqrt(n);
  const auto at = [&](double k) {
    const int64_t i = std::clamp<int64_t>(static_cast<int64_t>(std::floor(k)),
                                          0, static_cast<int64_t>(n) - 1);
    return v[static_cast<size_t>(i)];
  };
  MedianCi ci;
  ci.median = Median(v);
  ci.lo = at(n / 2 - half);
  ci.hi = at(std::ceil(n / 2 + half));
  return ci;
}

std::vector<double> PairedRatios(const std::vector<double>& numerator,
                                 const std::vector<double>& denominator,
                                 double scale) {
  std::vector<double> ratios;
  const size_t n = std::min(numerator.size(), denominator.size());
  ratios.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (denominator[i] > 0) {
      ratios.push_back(numerator[i] * scale / denominator[i]);
    }
  }
  return ratios;
}

std::vector<BarVerdict> EvaluateBar(const std::vector<BarPoint>& points,
                                    const BarRule& rule) {
  // Per operation, per W: the counted points.
  std::map<std::string, std::map<int, std::vector<const BarPoint*>>> by_op;
  for (const BarPoint& p : points) {
    if (p.bytes >= rule.min_bytes) by_op[p.op][p.world].push_back(&p);
  }
  std::vector<BarVerdict> verdicts;
  for (const auto& [op, worlds] : by_op) {
    BarVerdict v;
    v.op = op;
    bool first = true;
    for (const auto& [world, at_world] : worlds) {
      std::vector<double> ours, control;
      for (const BarPoint* p : at_world) {
        ours.push_back(p->ratio);
        control.push_back(p->control_ratio);
        if (first || p->ratio < v.worst.ratio) {
          v.worst = {p->world, p->bytes, p->ratio};
        }
        if (first || p->control_ratio < v.control_worst.ratio) {
          v.control_worst = {p->world, p->bytes, p->control_ratio};
        }
        first = false;
      }
      v.median_by_world[world] = Median(ours);
      v.control_median_by_world[world] = Median(control);
    }
    v.median_pass = true;
    for (const auto& [world, median] : v.median_by_world) {
      if (median < rule.median_at_least) {
        v.median_pass = false;
        v.failures.push_back(absl::StrCat("median ", Fixed(median), " < ",
                                          Fixed(rule.median_at_least),
                                          " at W = ", world));
      }
    }
    v.worst_minus_control_worst = v.worst.ratio - v.control_worst.ratio;
    const double floor = v.control_worst.ratio - rule.control_margin;
    v.worst_pass = v.worst.ratio >= floor;
    if (!v.worst_pass) {
      for (const auto& [world, at_world] : worlds) {
        for (const BarPoint* p : at_world) {
          if (p->ratio >= floor) continue;
          v.failures.push_back(absl::StrCat(
              "point ", Fixed(p->ratio), " (", Where({world, p->bytes, 0}),
              ") < control worst ", Fixed(v.control_worst.ratio), " - ",
              Fixed(rule.control_margin)));
        }
      }
    }
    v.pass = v.median_pass && v.worst_pass;
    verdicts.push_back(std::move(v));
  }
  return verdicts;
}

std::string BarSummaryLine(const BarVerdict& verdict, const BarRule& rule) {
  std::vector<std::string> medians;
  for (const auto& [world, median] : verdict.median_by_world) {
    medians.push_back(absl::StrCat("W = ", world, ": ", Fixed(median)));
  }
  const std::string details = absl::StrCat(
      "median over sizes >= ", HumanBytes(rule.min_bytes), " ",
      absl::StrJoin(medians, ", "), " (bar ", Fixed(rule.median_at_least),
      "); worst ", Fixed(verdict.worst.ratio), " (", Where(verdict.worst),
      ") against control worst ", Fixed(verdict.control_worst.ratio), " (",
      Where(verdict.control_worst), "), difference ",
      Fixed(verdict.worst_minus_control_worst), " (bar -",
      Fixed(rule.control_margin), ")");
  if (verdict.pass) return absl::StrCat(verdict.op, ": PASS (", details, ")");
  return absl::StrCat(verdict.op,
                      ": FAIL: ", absl::StrJoin(verdict.failures, "; "), " (",
                      details, ")");
}

int BalancedOrderCycle(int sides) { return sides % 2 ? 2 * sides : sides; }

std::vector<int> BalancedOrder(int sides, int64_t repetition) {
  const int64_t row = repetition % BalancedOrderCycle(sides);
  // First row 0, 1, n-1, 2, n-2, ...; row r adds r (mod n); an odd n also
  // needs the n rows reversed.
  std::vector<int> order(sides);
  for (int j = 0; j < sides; ++j) {
    const int first = j == 0 ? 0 : j % 2 ? (j + 1) / 2 : sides - j / 2;
    order[j] = static_cast<int>((first + row) % sides);
  }
  if (row >= sides) std::reverse(order.begin(), order.end());
  return order;
}

std::string HumanBytes(int64_t bytes) {
  if (bytes >= kMiB) return absl::StrCat(bytes / kMiB, " MiB");
  return absl::StrCat(bytes / kKiB, " KiB");
}

}  // namespace shardd::bench
