#include "daemon/node/checkpoint_catalog.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/recovery/shard_checkpoint.h"

namespace shardd::node {

CheckpointCatalog::CheckpointCatalog(std::string dir) : dir_(std::move(dir)) {}

void CheckpointCatalog::Scan(int rank) {
  if (dir_.empty()) return;
  std::set<int64_t> verified;
  std::string problem;
  absl::StatusOr<std::vector<int64_t>> steps =
      recovery::ListShardCheckpoints(dir_, rank);
  if (steps.ok()) {
    for (const int64_t step : *steps) {
      const std::string path = recovery::ShardCheckpointPath(dir_, rank, step);
      absl::StatusOr<v1::ShardHeader> header =
          recovery::VerifyShardCheckpoint(path);
      if (header.ok()) {
        verified.insert(step);
      } else {
        // Left out of the inventory: a rollback never plans this step.
        std::fprintf(stderr, "shardd: ignoring checkpoint: %s\n",
                     header.status().ToString().c_str());
        absl::StrAppend(&problem, problem.empty() ? "" : "; ",
                        header.status().ToString());
      }
    }
  } else if (!absl::IsNotFound(steps.status())) {
    problem = steps.status().ToString();
  }
  absl::MutexLock lock(&mu_);
  rank_ = rank;
  verified_ = std::move(verified);
  problem_ = std::move(problem);
}

void CheckpointCatalog::NoteWritten(int rank, int64_t step) {
  if (dir_.empty()) return;
  absl::MutexLock lock(&mu_);
  if (rank_ != rank) {
    rank_ = rank;
    verified_.clear();
  }
  verified_.insert(step);
}

void CheckpointCatalog::NoteBad(int64_t step, const std::string& problem) {
  absl::MutexLock lock(&mu_);
  verified_.erase(step);
  problem_ = problem;
}

void CheckpointCatalog::AbandonAbove(int rank, int64_t step) {
  if (dir_.empty()) return;
  if (absl::Status removed =
          recovery::RemoveShardCheckpointsAbove(dir_, rank, step);
      !removed.ok()) {
    std::fprintf(stderr, "shardd: rollback to step %lld: %s\n",
                 static_cast<long long>(step), removed.ToString().c_str());
  }
}

v1::CheckpointInventory CheckpointCatalog::Inventory() const {
  v1::CheckpointInventory out;
  out.set_keeps(!dir_.empty());
  if (dir_.empty()) return out;
  int rank = -1;
  {
    absl::MutexLock lock(&mu_);
    rank = rank_;
    out.set_problem(problem_);
  }
  if (rank < 0) return out;
  // The files still there (a readdir; the writer prunes old ones).
  absl::StatusOr<std::vector<int64_t>> on_disk =
      recovery::ListShardCheckpoints(dir_, rank);
  if (!on_disk.ok()) return out;
  std::vector<int64_t> steps;
  {
    absl::MutexLock lock(&mu_);
    for (const int64_t step : *on_disk) {
      if (verified_.count(step) > 0) steps.push_back(step);
    }
  }
  // The coordinator takes at most kMaxReportedSteps (a rollback wants the
  // newest): a longer --checkpoint_keep_last must not cost the lease.
  const size_t first =
      steps.size() > kMaxReportedSteps ? steps.size() - kMaxReportedSteps : 0;
  for (size_t i = first; i < steps.size(); ++i) out.add_steps(steps[i]);
  return out;
}

}  // namespace shardd::node
