#ifndef SHARDD_DAEMON_NODE_COMMIT_SINK_H_
#define SHARDD_DAEMON_NODE_COMMIT_SINK_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "daemon/node/event_log.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/commit_log.h"

namespace shardd::node {

// What follows a change of the node's committed state, in one place so
// that every path does all of it: a step committed (by Step, or an
// in-doubt step applied) gets its commit-log record, the StepCommitted
// event trainers watch, and a checkpoint every `checkpoint_interval_steps`;
// a state installed otherwise (registered, restored, recovered, the job's
// final step) gets its commit-log record.
//
// The commit log (optional; tests and the demo check it for steps applied
// twice or skipped and replicas that disagree) records the CRC-32C of the
// shard's whole state, read through the engine's math.
//
// Thread-safe: its options are fixed at construction and the commit log
// and event log are thread-safe. Owns the commit log; `events` outlives the
// sink.
class CommitSink {
 public:
  struct Options {
    // Null: no commit log.
    std::unique_ptr<recovery::CommitLog> commit_log;
    EventLog* events = nullptr;
    int64_t checkpoint_interval_steps = 0;
    // Writes this rank's checkpoint of (step, epoch); called every interval.
    std::function<void(int64_t step, int64_t epoch)> write_checkpoint;
  };
  explicit CommitSink(Options options);

  bool logs_commits() const { return options_.commit_log != nullptr; }

  // `step` (its gradient norm) committed in `epoch` on `engine`.
  void Committed(StepEngine& engine, int64_t step, double grad_norm,
                 int64_t epoch);
  // A commit-log record of `kind` for the engine's current state.
  void Record(StepEngine& engine, recovery::CommitRecord::Kind kind,
              int64_t step, int64_t epoch);

 private:
  Options options_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_COMMIT_SINK_H_
