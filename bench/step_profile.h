#ifndef SHARDD_BENCH_STEP_PROFILE_H_
#define SHARDD_BENCH_STEP_PROFILE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::bench {

// Named numbers of one line, e.g. one step of a trainer's profile.
using KeyValues = std::map<std::string, double>;

// Parses "PREFIX k=v k=v ..." (single spaces or runs of them; every value a
// number). nullopt when the line does not start with `prefix` followed by a
// space, or a token is not k=v with a numeric v (the line is then someone
// else's: example_trainer's "step N ..." lines, torch_step's table). A key
// given twice keeps its last value.
std::optional<KeyValues> ParseKeyValues(absl::string_view line,
                                        absl::string_view prefix);

// Where a step's time goes, from the "profile step=N ..." records of every
// rank (example_trainer --profile): per rank the mean over its records with
// step > `after_step` of every other key, then the mean over ranks. Means,
// so that the parts add up like the records' (total_ms = compute_ms + ... ).
// Errors (INVALID_ARGUMENT): no ranks, a rank without such records or
// without "step", or records whose keys differ.
absl::StatusOr<KeyValues> MeanOverRanks(
    const std::vector<std::vector<KeyValues>>& ranks, int64_t after_step);

// The step time W unsynchronised processes sustain (the compute-only
// floor): the largest over ranks of a rank's median `key` over its records
// with step > `after_step`. Errors as MeanOverRanks.
absl::StatusOr<double> SlowestRankMedian(
    const std::vector<std::vector<KeyValues>>& ranks, int64_t after_step,
    const std::string& key);

// A row's step time and the compute-only floor of its trainer (ms): the
// example trainer's for shardd rows, torch's for DDP.
struct StepAndFloor {
  double step_ms = 0;
  double floor_ms = 0;
};

// By row ("ddp", "no_shard", "full_shard", "hybrid_shard", ...): the figures
// exposed_comm_ms_<row> = step - floor, and exposed_comm_ratio_<row>_to_ddp
// for every other row when "ddp" is there (NaN, i.e. JSON null, when DDP
// exposes nothing: exposed_comm_ms_ddp <= 0).
std::map<std::string, double> ExposedCommFigures(
    const std::map<std::string, StepAndFloor>& rows);

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_STEP_PROFILE_H_
