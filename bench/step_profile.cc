#include "bench/step_profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardd::bench {
namespace {

// Each rank's records with step > after_step.
absl::StatusOr<std::vector<std::vector<KeyValues>>> Measured(
    const std::vector<std::vector<KeyValues>>& ranks, int64_t after_step) {
  if (ranks.empty()) return absl::InvalidArgumentError("no ranks");
  std::vector<std::vector<KeyValues>> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    out.emplace_back();
    for (const KeyValues& record : ranks[r]) {
      auto step = record.find("step");
      if (step == record.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ": a record without step"));
      }
      if (step->second > static_cast<double>(after_step)) {
        out.back().push_back(record);
      }
    }
    if (out.back().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", r, ": no profiled step after step ", after_step));
    }
  }
  return out;
}

}  // namespace

std::optional<KeyValues> ParseKeyValues(absl::string_view line,
                                        absl::string_view prefix) {
  if (line.size() <= prefix.size() || line.substr(0, prefix.size()) != prefix ||
      line[prefix.size()] != ' ') {
    return std::nullopt;
  }
  KeyValues out;
  for (absl::string_view token :
       absl::StrSplit(line.substr(prefix.size() + 1), ' ', absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    double value = 0;
    if (eq == absl::string_view::npos || eq == 0 ||
        !absl::SimpleAtod(token.substr(eq + 1), &value)) {
      return std::nullopt;
    }
    out[std::string(token.substr(0, eq))] = value;
  }
  return out;
}

absl::StatusOr<KeyValues> MeanOverRanks(
    const std::vector<std::vector<KeyValues>>& ranks, int64_t after_step) {
  absl::StatusOr<std::vector<std::vector<KeyValues>>> measured =
      Measured(ranks, after_step);
  if (!measured.ok()) return measured.status();
  const KeyValues& first = measured->front().front();
  KeyValues sum;
  for (size_t r = 0; r < measured->size(); ++r) {
    const std::vector<KeyValues>& records = (*measured)[r];
    KeyValues rank_sum;
    for (const KeyValues& record : records) {
      if (record.size() != first.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ": records with different keys"));
      }
      for (const auto& [key, value] : record) {
        if (!first.contains(key)) {
          return absl::InvalidArgumentError(
              absl::StrCat("rank ", r, ": unexpected key ", key));
        }
        rank_sum[key] += value;
      }
    }
    for (const auto& [key, value] : rank_sum) {
      sum[key] += value / static_cast<double>(records.size());
    }
  }
  sum.erase("step");
  for (auto& [key, value] : sum) {
    value /= static_cast<double>(measured->size());
  }
  return sum;
}

absl::StatusOr<double> SlowestRankMedian(
    const std::vector<std::vector<KeyValues>>& ranks, int64_t after_step,
    const std::string& key) {
  absl::StatusOr<std::vector<std::vector<KeyValues>>> measured =
      Measured(ranks, after_step);
  if (!measured.ok()) return measured.status();
  double slowest = 0;
  for (size_t r = 0; r < measured->size(); ++r) {
    std::vector<double> values;
    for (const KeyValues& record : (*measured)[r]) {
      auto it = record.find(key);
      if (it == record.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", r, ": a record without ", key));
      }
      values.push_back(it->second);
    }
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    const double median =
        n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
    slowest = std::max(slowest, median);
  }
  return slowest;
}

std::map<std::string, double> ExposedCommFigures(
    const std::map<std::string, StepAndFloor>& rows) {
  std::map<std::string, double> figures;
  for (const auto& [row, t] : rows) {
    figures[absl::StrCat("exposed_comm_ms_", row)] = t.step_ms - t.floor_ms;
  }
  auto ddp = rows.find("ddp");
  if (ddp == rows.end()) return figures;
  const double ddp_ms = ddp->second.step_ms - ddp->second.floor_ms;
  for (const auto& [row, t] : rows) {
    if (row == "ddp") continue;
    figures[absl::StrCat("exposed_comm_ratio_", row, "_to_ddp")] =
        ddp_ms > 0 ? (t.step_ms - t.floor_ms) / ddp_ms
                   : std::numeric_limits<double>::quiet_NaN();
  }
  return figures;
}

}  // namespace shardd::bench
