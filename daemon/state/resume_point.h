#ifndef SHARDD_DAEMON_STATE_RESUME_POINT_H_
#define SHARDD_DAEMON_STATE_RESUME_POINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardd::state {

// The step a stopped job resumes from, and the job that wrote it.
struct ResumePoint {
  int64_t step = 0;
  // W of the job that wrote the checkpoints (its ranks 0..W-1 each have a
  // folder DIR/rank-R).
  int world_size = 0;
};

// Which step of a checkpoint directory (recovery/shard_checkpoint.h's
// layout, DIR/rank-R/step-N.shardckpt) a new job resumes from: the latest
// step that every rank of the old job holds intact.
//
// Every daemon of the new job decides alone from the same (shared)
// directory, and the decision is a pure function of its listing and of the
// files' checksums, so they all decide the same without talking.
//
// Pure functions and stateless; thread-safe.
class ResumePointChooser {
 public:
  // steps_by_rank: for every rank folder found, the steps of its files
  // (any order). The old W is the number of folders, which must be ranks
  // 0..W-1 (FAILED_PRECONDITION naming the missing rank otherwise). The
  // latest step present for every rank; NOT_FOUND "no step that all W
  // ranks hold" when there is none (or no folder at all).
  static absl::StatusOr<ResumePoint> Choose(
      const std::map<int, std::vector<int64_t>>& steps_by_rank);

  // Checks one file: OK when intact, DATA_LOSS/NOT_FOUND naming it if not.
  using Verify = std::function<absl::Status(int rank, int64_t step)>;

  // Choose, then verify each rank's file of the chosen step; a file that
  // fails is dropped from the listing and the choice repeats (an older
  // step), so that the result is a step every rank holds intact. The
  // problems met are appended to `problems` (may be null). Verifies each
  // file at most once.
  static absl::StatusOr<ResumePoint> ChooseVerified(
      std::map<int, std::vector<int64_t>> steps_by_rank, const Verify& verify,
      std::vector<std::string>* problems);

  // Lists DIR: the rank-R folders and the steps of their checkpoint files
  // (temporaries ignored). NOT_FOUND naming DIR when it does not exist.
  static absl::StatusOr<std::map<int, std::vector<int64_t>>> List(
      const std::string& dir);

  // List, then ChooseVerified with every file's CRCs checked
  // (recovery::VerifyShardCheckpoint).
  static absl::StatusOr<ResumePoint> ChooseFromDirectory(
      const std::string& dir, std::vector<std::string>* problems);
};

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_RESUME_POINT_H_
