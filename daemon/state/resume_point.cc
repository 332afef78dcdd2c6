#include "daemon/state/resume_point.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/recovery/shard_checkpoint.h"

namespace shardd::state {

absl::StatusOr<ResumePoint> ResumePointChooser::Choose(
    const std::map<int, std::vector<int64_t>>& steps_by_rank) {
  if (steps_by_rank.empty()) {
    return absl::NotFoundError("no rank-R checkpoint folder");
  }
  const int world = static_cast<int>(steps_by_rank.size());
  for (int r = 0; r < world; ++r) {
    if (steps_by_rank.count(r) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " has no checkpoint folder, but ranks up to ",
          steps_by_rank.rbegin()->first, " do"));
    }
  }
  std::set<int64_t> common(steps_by_rank.at(0).begin(),
                           steps_by_rank.at(0).end());
  for (int r = 1; r < world && !common.empty(); ++r) {
    const std::set<int64_t> theirs(steps_by_rank.at(r).begin(),
                                   steps_by_rank.at(r).end());
    std::set<int64_t> both;
    std::set_intersection(common.begin(), common.end(), theirs.begin(),
                          theirs.end(), std::inserter(both, both.begin()));
    common = std::move(both);
  }
  if (common.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no step that all ", world, " ranks hold"));
  }
  return ResumePoint{.step = *common.rbegin(), .world_size = world};
}

absl::StatusOr<ResumePoint> ResumePointChooser::ChooseVerified(
    std::map<int, std::vector<int64_t>> steps_by_rank, const Verify& verify,
    std::vector<std::string>* problems) {
  std::set<std::pair<int, int64_t>> verified;
  while (true) {
    absl::StatusOr<ResumePoint> point = Choose(steps_by_rank);
    if (!point.ok()) return point;
    bool intact = true;
    for (auto& [rank, steps] : steps_by_rank) {
      if (verified.count({rank, point->step}) > 0) continue;
      absl::Status s = verify(rank, point->step);
      if (s.ok()) {
        verified.insert({rank, point->step});
        continue;
      }
      if (problems != nullptr) problems->push_back(s.ToString());
      steps.erase(std::remove(steps.begin(), steps.end(), point->step),
                  steps.end());
      intact = false;
    }
    if (intact) return point;
  }
}

absl::StatusOr<std::map<int, std::vector<int64_t>>> ResumePointChooser::List(
    const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot list ", dir));
  }
  absl::Cleanup closer = [d] { closedir(d); };
  std::map<int, std::vector<int64_t>> out;
  while (const dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    int rank = 0;
    if (!absl::StartsWith(name, "rank-") ||
        !absl::SimpleAtoi(name.substr(5), &rank) || rank < 0 ||
        name != absl::StrCat("rank-", rank)) {
      continue;
    }
    absl::StatusOr<std::vector<int64_t>> steps =
        recovery::ListShardCheckpoints(dir, rank);
    if (steps.ok()) {
      out[rank] = *std::move(steps);
    } else if (absl::IsNotFound(steps.status())) {
      out[rank] = {};
    } else {
      return steps.status();
    }
  }
  return out;
}

absl::StatusOr<ResumePoint> ResumePointChooser::ChooseFromDirectory(
    const std::string& dir, std::vector<std::string>* problems) {
  absl::StatusOr<std::map<int, std::vector<int64_t>>> listing = List(dir);
  if (!listing.ok()) return listing.status();
  absl::StatusOr<ResumePoint> point = ChooseVerified(
      *std::move(listing),
      [&](int rank, int64_t step) {
        return recovery::VerifyShardCheckpoint(
                   recovery::ShardCheckpointPath(dir, rank, step))
            .status();
      },
      problems);
  if (!point.ok()) {
    return absl::Status(point.status().code(),
                        absl::StrCat(dir, ": ", point.status().message()));
  }
  return point;
}

}  // namespace shardd::state
