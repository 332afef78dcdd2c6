#ifndef SHARDD_DAEMON_NODE_SHARD_CHECKPOINTS_H_
#define SHARDD_DAEMON_NODE_SHARD_CHECKPOINTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/model_config.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/checkpoint_catalog.h"
#include "daemon/node/checkpoint_stager.h"
#include "daemon/node/membership.h"
#include "daemon/node/shard_transfer.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/shard_memory.h"

namespace shardd::node {

// This rank's sharded checkpoints (DIR/rank-R/step-N.shardckpt), the
// fallback when a shard has no live replica: writing one after a commit
// (the catalog and the coordinator hear of it at once, so that a failure
// right after rolls back to it), and restoring one in two phases, so that
// the caller can keep trainer operations out only while the state is
// overwritten: Prepare finds the file, checks its model and builds an
// engine when the node has none; Read fills the engine and installs the
// checkpoint's step.
//
// With `async` (--async_checkpoints) a write is staged: the shard is copied
// into host staging on the step path and written by a CheckpointStager's
// thread, and the catalog and the coordinator hear of the checkpoint only
// once it is on disk. A rollback first discards and waits for a write in
// flight (AbandonAbove), a restore waits for it (Prepare), so that no
// checkpoint of an abandoned timeline lands after its timeline was removed.
//
// Thread-compatible for a rank's one writer and one restorer (the node
// calls them from the trainer's Step and the epoch thread, which a restore
// keeps apart by the caller's trainer-op lock); the staged writes run on
// the stager's thread. Not owned: the pointers in Options outlive it.
class ShardCheckpoints {
 public:
  struct Options {
    std::string dir;  // Empty: no checkpoints.
    int keep_last = 2;
    const recovery::ShardMemory* shard_memory = nullptr;
    CheckpointCatalog* catalog = nullptr;
    Membership* membership = nullptr;
    metrics::NodeObserver* observer = nullptr;  // Optional.
    // Stage writes and write them in the background.
    bool async = false;
    // With `async`: admits the staging buffer's host bytes
    // (EngineAdmission::AdmitCheckpointStaging); null admits everything.
    std::function<absl::Status(int64_t bytes)> admit_staging = nullptr;
    // With `async`: told the staging bytes held whenever they change.
    std::function<void(int64_t bytes)> staging_held = nullptr;
    // The newest checkpoint step every rank holds, as the coordinator last
    // said (-1: not known); a write never prunes that step's file.
    // Optional.
    std::function<int64_t()> common_step = nullptr;
    // How long a rollback or a restore waits for a write in flight.
    absl::Duration quiesce_timeout = absl::Seconds(30);
  };
  explicit ShardCheckpoints(Options options);
  ~ShardCheckpoints();

  bool enabled() const { return !options_.dir.empty(); }

  // Writes `shard` (DescribeShard's) as this rank's checkpoint of `step`;
  // with `async`, stages it and returns (a checkpoint offered while the
  // previous one is still being written is skipped; one whose staging the
  // admission refuses is written at once). A failure is logged, not
  // returned: training goes on, the next interval tries again, and a
  // fallback meanwhile uses an older checkpoint.
  void Write(const ShardDescription& shard, int64_t step, int64_t epoch);

  // A rollback to `step`: a staged write of a later step is discarded (its
  // file removed once written) and waited for, then the rank's files above
  // `step` are removed (CheckpointCatalog::AbandonAbove).
  void AbandonAbove(int rank, int64_t step);

  // Waits for a staged write in flight (none without `async`): OK, or
  // DEADLINE_EXCEEDED after Options::quiesce_timeout.
  absl::Status Quiesce();

  // At a graceful stop (trainer calls drained): waits for a write in flight
  // (up to kStopWait; DEADLINE_EXCEEDED then), then writes `shard` at once when
  // its committed step's checkpoint was due and skipped (the previous write was
  // still running), so that a job ending on a slow disk keeps its last
  // checkpoint. Nothing without `async`.
  absl::Status Flush(const ShardDescription& shard, int64_t epoch);
  static constexpr absl::Duration kStopWait = absl::Minutes(10);

  // A restore under way: the file and the engine it fills.
  struct Restore {
    std::string path;
    std::shared_ptr<StepEngine> engine;
    core::ModelConfig model;
    uint64_t fingerprint = 0;
    // The engine was built for the restore (the node had none); on
    // failure it is simply dropped.
    bool fresh = false;
  };
  // Finds rank `rank`'s checkpoint of `step` (-1: the latest on disk) and
  // checks that it holds a shard of the node's model (`engine`, `model`),
  // or, when the node has no engine, builds one for the checkpoint's model
  // with `create_engine`. Errors name the file.
  absl::StatusOr<Restore> Prepare(
      int rank, int64_t step, std::shared_ptr<StepEngine> engine,
      const std::optional<core::ModelConfig>& model,
      const std::function<absl::StatusOr<std::unique_ptr<StepEngine>>(
          const core::ModelConfig&)>& create_engine);
  // Reads the checkpoint into the engine's state and installs its step;
  // the step restored. On failure the engine's state is garbage.
  absl::StatusOr<int64_t> Read(const Restore& restore);

 private:
  // `shard`'s header as the checkpoint of (step, epoch).
  static v1::ShardHeader HeaderOf(const ShardDescription& shard, int64_t step,
                                  int64_t epoch);
  // Writes the checkpoint now, from `sources` in `memory`; false when the
  // write failed (logged and counted).
  bool WriteNow(v1::ShardHeader header,
                const std::vector<recovery::SectionSource>& sources,
                const recovery::ShardMemory& memory, int rank, int64_t step);
  // WriteNow's halves: the file (false when it failed: logged and
  // counted), then the catalog, the coordinator and the observer.
  bool WriteFile(v1::ShardHeader header,
                 const std::vector<recovery::SectionSource>& sources,
                 const recovery::ShardMemory& memory, int rank, int64_t step);
  void NoteWritten(int rank, int64_t step);
  // The stager's write callback.
  void WriteStaged(const CheckpointStager::Job& job);

  const Options options_;
  // With `async`.
  std::unique_ptr<CheckpointStager> stager_;
  // The step of the latest checkpoint skipped (-1: none).
  std::atomic<int64_t> last_skipped_{-1};
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARD_CHECKPOINTS_H_
