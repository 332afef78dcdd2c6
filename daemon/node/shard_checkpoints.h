#ifndef SHARDD_DAEMON_NODE_SHARD_CHECKPOINTS_H_
#define SHARDD_DAEMON_NODE_SHARD_CHECKPOINTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/model_config.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/checkpoint_catalog.h"
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
// Thread-compatible for a rank's one writer and one restorer (the node
// calls them from the trainer's Step and the epoch thread, which a restore
// keeps apart by the caller's trainer-op lock). Not owned: the pointers in
// Options outlive it.
class ShardCheckpoints {
 public:
  struct Options {
    std::string dir;  // Empty: no checkpoints.
    int keep_last = 2;
    const recovery::ShardMemory* shard_memory = nullptr;
    CheckpointCatalog* catalog = nullptr;
    Membership* membership = nullptr;
    metrics::NodeObserver* observer = nullptr;  // Optional.
  };
  explicit ShardCheckpoints(Options options);

  bool enabled() const { return !options_.dir.empty(); }

  // Writes `shard` (DescribeShard's) as this rank's checkpoint of `step`.
  // A failure is logged, not returned: training goes on, the next interval
  // tries again, and a fallback meanwhile uses an older checkpoint.
  void Write(const ShardDescription& shard, int64_t step, int64_t epoch);

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
  const Options options_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARD_CHECKPOINTS_H_
