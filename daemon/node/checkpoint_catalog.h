#ifndef SHARDD_DAEMON_NODE_CHECKPOINT_CATALOG_H_
#define SHARDD_DAEMON_NODE_CHECKPOINT_CATALOG_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/synchronization/mutex.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {

// Which sharded checkpoints of this daemon's rank it can vouch for: the
// files in DIR/rank-R whose every CRC it checked (scanned at start, or
// written by this process), so that the coordinator plans a rollback only
// to a step every rank holds intact. What the inventory reports is the
// vouched-for steps still on disk (the writer prunes old files).
//
// Thread-safe: the heartbeat thread reads the inventory while the epoch
// thread scans and records. Owns nothing but its state; `dir` empty means
// the daemon keeps no checkpoints.
class CheckpointCatalog {
 public:
  explicit CheckpointCatalog(std::string dir);

  // Verifies every checkpoint file of `rank` (reads each whole, in bounded
  // pieces) and makes them the vouched-for set; a bad file is left out and
  // named in the inventory's problem. Blocks for the reads.
  void Scan(int rank);
  // This process wrote and synced `step`'s checkpoint of `rank`.
  void NoteWritten(int rank, int64_t step);
  // Restoring `step` failed with `problem`: it is no longer vouched for.
  void NoteBad(int64_t step, const std::string& problem);
  // A rollback to `step`: the rank's files of later steps belong to the
  // abandoned timeline and are removed, so that they never again count as
  // proof that the job reached them. Failures are logged (best effort).
  void AbandonAbove(int rank, int64_t step);

  // The vouched-for steps on disk, ascending: the newest kMaxReportedSteps
  // (what the coordinator accepts in a report).
  v1::CheckpointInventory Inventory() const;
  static constexpr size_t kMaxReportedSteps = 1024;
  bool keeps() const { return !dir_.empty(); }

 private:
  const std::string dir_;
  mutable absl::Mutex mu_;
  int rank_ ABSL_GUARDED_BY(mu_) = -1;
  std::set<int64_t> verified_ ABSL_GUARDED_BY(mu_);
  std::string problem_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CHECKPOINT_CATALOG_H_
