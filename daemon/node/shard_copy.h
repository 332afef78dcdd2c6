#ifndef SHARDD_DAEMON_NODE_SHARD_COPY_H_
#define SHARDD_DAEMON_NODE_SHARD_COPY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/core/model_config.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/event_log.h"
#include "daemon/node/membership.h"
#include "daemon/node/shard_transfer.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/shard_memory.h"
#include "shardd/v1/common.pb.h"

namespace shardd::node {

// A replacement's copy of its shard from a replica (the plan's
// ShardTransfer), the target side of Peer.FetchShard: it tries the plan's
// sources in order until the recovery deadline, each time building an
// engine for the model the source announces (or taking the one Prepare
// built from the first source's Probe while the epoch's communicators
// formed), filling its state sections from the stream (or, when the epoch's
// replica group is healthy, from Recvs on it while the stream carries the
// header, the pieces' CRCs and the trailer), verifying every piece, and
// handing the engine over to be installed. A source whose copy failed is
// reported to the coordinator when no source succeeded.
//
// Thread-safe: Prepare runs on its own thread while the epoch thread builds
// communicators; Run on the epoch thread. Not owned: everything in Options
// that is a pointer outlives the copy.
class ShardCopy {
 public:
  struct Options {
    // The Peer clients (gRPC, injected). Without them no copy is possible.
    FetchShardFn fetch_shard;
    ProbePeerFn probe_peer;
    // Ask sources to send the bytes over the epoch's replica group.
    bool over_replica_group = true;
    // How long a copy keeps trying its sources.
    absl::Duration recovery_timeout = absl::Seconds(120);
    const recovery::ShardMemory* shard_memory = nullptr;
    metrics::NodeObserver* observer = nullptr;  // Optional.
    EventLog* events = nullptr;
    Membership* membership = nullptr;
    // A zero-filled engine for `model` on this rank at (world, factor).
    std::function<absl::StatusOr<std::unique_ptr<StepEngine>>(
        const core::ModelConfig& model, int world, int factor)>
        create_engine;
    // `epoch`'s replica group when this node has built it and it is
    // healthy; null otherwise.
    std::function<std::shared_ptr<comm::Collective>(int64_t epoch)>
        replica_group_of;
    // Makes a verified copy (its engine at `step`) the node's, in `epoch`.
    std::function<void(std::shared_ptr<StepEngine> engine,
                       core::ModelConfig model, uint64_t fingerprint,
                       int64_t step, int64_t epoch)>
        install;
  };
  explicit ShardCopy(Options options);

  // An engine was prepared for the next copy.
  bool prepared() const;
  // Learns the model from the plan's first source (Probe) and builds the
  // engine for the copy, so that faulting in its memory overlaps the
  // rendezvous instead of the copy. Best effort: Run builds one itself
  // when this failed or the source differs.
  void Prepare(const v1::ShardTransfer& plan, int world, int factor);

  // Copies the shard from the plan's sources. True: copied and installed;
  // false: the sources hold no model yet (nothing to copy); an error when
  // every source failed or the deadline passed.
  absl::StatusOr<bool> Run(int64_t epoch, const v1::ShardTransfer& plan,
                           int world, int factor);

 private:
  struct PreparedEngine {
    std::shared_ptr<StepEngine> engine;
    core::ModelConfig model;
    uint64_t fingerprint = 0;
    int source = -1;
    int world_size = 0;
    int sharding_factor = 0;
    absl::Duration build_time;
  };
  absl::Status FetchFrom(int64_t epoch, const v1::ShardTransfer& plan,
                         int source, int world, int factor, MonoTime deadline);
  std::string AddressOf(int rank) const;

  const Options options_;
  mutable absl::Mutex mu_;
  std::optional<PreparedEngine> prepared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARD_COPY_H_
