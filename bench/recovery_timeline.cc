#include "bench/recovery_timeline.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardd::bench {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::optional<CoordinatorDecision> ParseCoordinatorDecision(
    absl::string_view line) {
  // "TIME coordinator: epoch E KIND: reason"
  std::vector<absl::string_view> w =
      absl::StrSplit(line, absl::MaxSplits(' ', 4));
  CoordinatorDecision d;
  std::string error;
  if (w.size() < 5 || w[1] != "coordinator:" || w[2] != "epoch" ||
      !absl::SimpleAtoi(w[3], &d.epoch) ||
      !absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", std::string(w[0]),
                       absl::UTCTimeZone(), &d.time, &error)) {
    return std::nullopt;
  }
  const size_t colon = w[4].find(':');
  if (colon == absl::string_view::npos || colon == 0) return std::nullopt;
  d.kind = std::string(w[4].substr(0, colon));
  d.reason =
      std::string(absl::StripLeadingAsciiWhitespace(w[4].substr(colon + 1)));
  return d;
}

absl::StatusOr<RecoveredLine> ParseRecoveredLine(absl::string_view line) {
  // shardd rank R recovered shard S at step N from rank X: B bytes in T s
  // (M MB/s)
  std::vector<absl::string_view> w = absl::StrSplit(line, ' ');
  RecoveredLine r;
  const bool ok =
      w.size() >= 17 && w[0] == "shardd" && w[1] == "rank" &&
      absl::SimpleAtoi(w[2], &r.rank) && w[3] == "recovered" &&
      w[4] == "shard" && absl::SimpleAtoi(w[5], &r.shard) && w[6] == "at" &&
      w[7] == "step" && absl::SimpleAtoi(w[8], &r.step) && w[9] == "from" &&
      w[10] == "rank" &&
      absl::SimpleAtoi(absl::StripSuffix(w[11], ":"), &r.source) &&
      absl::SimpleAtoi(w[12], &r.bytes) && w[13] == "bytes" && w[14] == "in" &&
      absl::SimpleAtod(w[15], &r.seconds) && w[16] == "s";
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a \"recovered shard\" line: '", line, "'"));
  }
  return r;
}

std::optional<int64_t> ParseCommittedStep(absl::string_view line) {
  std::vector<absl::string_view> w = absl::StrSplit(line, ' ');
  int64_t step = 0;
  if (w.size() < 3 || w[0] != "step" || !absl::SimpleAtoi(w[1], &step) ||
      w[2] != "loss") {
    return std::nullopt;
  }
  return step;
}

absl::StatusOr<RecoveryPhases> ComputeRecoveryPhases(
    const RecoveryObservations& obs) {
  // The log truncates to milliseconds: a decision stamped with the kill's
  // millisecond may come after it.
  const absl::Time since = absl::FromUnixMillis(absl::ToUnixMillis(obs.kill));
  const std::string joined_text =
      absl::StrCat("rank ", obs.killed_rank, " joined");
  std::optional<CoordinatorDecision> detected, joined, ready;
  for (const CoordinatorDecision& d : obs.decisions) {
    if (d.time < since) continue;
    if (!detected &&
        (d.kind == "EPOCH_STARTED" || d.kind == "MEMBER_REMOVED")) {
      detected = d;
    }
    if (!joined && d.kind == "MEMBER_JOINED" &&
        absl::StartsWith(d.reason, joined_text)) {
      joined = d;
    }
    if (joined && !ready && d.kind == "EPOCH_READY") ready = d;
  }
  if (!detected) {
    return absl::FailedPreconditionError(
        "no EPOCH_STARTED or MEMBER_REMOVED decision after the kill");
  }
  if (!joined) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no MEMBER_JOINED of rank ", obs.killed_rank, " after the kill"));
  }
  if (!ready) {
    return absl::FailedPreconditionError(
        "no EPOCH_READY after the replacement joined");
  }
  // Training resumed: each trainer's first committed step after the
  // recovered one; the last of them.
  std::map<std::string, absl::Time> resumed;
  std::set<std::string> trainers;
  std::vector<absl::Time> steps0;
  for (const StampedLine& l : obs.trainer_lines) {
    trainers.insert(l.source);
    const std::optional<int64_t> step = ParseCommittedStep(l.text);
    if (!step) continue;
    if (l.source == "trainer-0") steps0.push_back(l.time);
    if (*step > obs.recovered.step && !resumed.count(l.source)) {
      resumed[l.source] = l.time;
    }
  }
  for (int r = 0; r < obs.world_size; ++r) {
    const std::string name = absl::StrCat("trainer-", r);
    if (!resumed.count(name)) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, " printed no step after the recovered step ",
                       obs.recovered.step));
    }
  }
  absl::Time last = absl::InfinitePast();
  for (const auto& [name, time] : resumed) last = std::max(last, time);
  std::vector<double> intervals;
  for (size_t i = 1; i < steps0.size(); ++i) {
    if (steps0[i - 1] < obs.kill && steps0[i] > obs.kill) continue;
    intervals.push_back(absl::ToDoubleSeconds(steps0[i] - steps0[i - 1]));
  }

  RecoveryPhases p;
  p.step_s = Median(intervals);
  p.detected_by =
      absl::StrContains(detected->reason, "reported")      ? "survivor report"
      : absl::StrContains(detected->reason, "lease")       ? "lease expiry"
      : absl::StrContains(detected->reason, "incarnation") ? "replacement join"
                                                           : detected->kind;
  p.transfer_s = obs.recovered.seconds;
  p.stream_s =
      absl::ToDoubleSeconds(obs.recovered_line - obs.engine_ready_line);
  p.engine_s = p.transfer_s - p.stream_s;
  p.detection_s = absl::ToDoubleSeconds(detected->time - obs.kill);
  p.join_wait_s =
      std::max(0.0, absl::ToDoubleSeconds(joined->time - detected->time));
  p.rendezvous_s =
      absl::ToDoubleSeconds(ready->time - joined->time) - p.transfer_s;
  p.first_step_s = absl::ToDoubleSeconds(last - ready->time);
  p.total_s = absl::ToDoubleSeconds(last - obs.kill);
  return p;
}

}  // namespace shardd::bench
