// The recovery timeline of bench/recovery: parsing the lines the
// coordinator, the replacement daemon and the trainers print, and splitting
// the time from a daemon's kill to training resumed into phases.
//
//   RecoveryObservations obs;  // kill time, decisions, stamped lines ...
//   absl::StatusOr<RecoveryPhases> phases = ComputeRecoveryPhases(obs);
//
// Pure functions, no I/O; thread-safe.

#ifndef SHARDD_BENCH_RECOVERY_TIMELINE_H_
#define SHARDD_BENCH_RECOVERY_TIMELINE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardd::bench {

// One line of the coordinator's decision log (stderr):
//   "2026-12-02T17:49:27.549Z coordinator: epoch 5 EPOCH_STARTED: reason"
struct CoordinatorDecision {
  absl::Time time;  // Millisecond resolution (the log's).
  int64_t epoch = 0;
  std::string kind;  // EPOCH_STARTED, MEMBER_REMOVED, MEMBER_JOINED, ...
  std::string reason;
};

// The decision on `line`; nullopt for any other line.
std::optional<CoordinatorDecision> ParseCoordinatorDecision(
    absl::string_view line);

// The replacement's line
//   "shardd rank R recovered shard S at step N from rank X: B bytes in T s
//    (M MB/s)"
struct RecoveredLine {
  int rank = -1;
  int shard = -1;
  int64_t step = -1;
  int source = -1;
  int64_t bytes = 0;
  double seconds = 0;
};

// INVALID_ARGUMENT quoting the line when it is not one.
absl::StatusOr<RecoveredLine> ParseRecoveredLine(absl::string_view line);

// The committed step of a trainer's "step N loss L grad_norm G" line;
// nullopt for other lines, "step N aborted ..." included.
std::optional<int64_t> ParseCommittedStep(absl::string_view line);

// A line of a child's output, stamped on arrival by the reader.
struct StampedLine {
  absl::Time time;
  std::string source;  // "trainer-0", ...
  std::string text;
};

// What one failure of one run left behind.
struct RecoveryObservations {
  absl::Time kill;  // Just before kill(2).
  int killed_rank = -1;
  RecoveredLine recovered;
  // The replacement's CopyEngineReady event (Trainer.WatchEvents; its
  // daemon's wall-clock time) and the arrival of its "recovered shard" line
  // (the stream runs between them).
  absl::Time engine_ready_line;
  absl::Time recovered_line;
  std::vector<CoordinatorDecision> decisions;  // In log order.
  std::vector<StampedLine> trainer_lines;      // Sources "trainer-R".
  int world_size = 0;
};

// Seconds of each phase (see bench/recovery.cc for the definitions).
// detection + join_wait + rendezvous + transfer + first_step = total, up to
// the coordinator log's millisecond rounding.
struct RecoveryPhases {
  double detection_s = 0;   // kill -> first EPOCH_STARTED / MEMBER_REMOVED
  double join_wait_s = 0;   // detection -> the replacement's MEMBER_JOINED
  double rendezvous_s = 0;  // MEMBER_JOINED -> EPOCH_READY, minus transfer
  double transfer_s = 0;    // the replacement's own figure
  double engine_s = 0;      // its probe + engine creation part
  double stream_s = 0;      // its stream (+ install) part
  double first_step_s = 0;  // EPOCH_READY -> last trainer's first new step
  double total_s = 0;       // kill -> that step
  double step_s = 0;  // median step interval of trainer-0 outside the failure
  // What told the coordinator: "survivor report", "lease expiry",
  // "replacement join", or the decision's kind.
  std::string detected_by;
};

// FAILED_PRECONDITION naming what is missing: no detection, join or ready
// epoch after the kill, or a trainer without a step after the recovered
// one.
absl::StatusOr<RecoveryPhases> ComputeRecoveryPhases(
    const RecoveryObservations& obs);

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_RECOVERY_TIMELINE_H_
