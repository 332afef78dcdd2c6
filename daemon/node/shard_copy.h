#ifndef SHARDD_DAEMON_NODE_SHARD_COPY_H_
#define SHARDD_DAEMON_NODE_SHARD_COPY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/core/clock.h"
#include "daemon/core/model_config.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/event_log.h"
#include "daemon/node/membership.h"
#include "daemon/node/shard_transfer.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/shard_memory.h"
#include "daemon/recovery/shard_stream.h"
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
// reported to the coordinator when no source succeeded. Each attempt's
// byte progress goes to the event log as RecoveryProgress
// TRANSFERRING_STATE (throttled by ProgressThrottle, numbered by attempt,
// from 0 again on a retry), so that `shardctl watch` shows the copy move.
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
    // Paces the progress events (deadlines use the real monotonic clock).
    // Not owned; never null.
    Clock* clock = Clock::Real();
    Membership* membership = nullptr;
    // A zero-filled engine for `model` on this rank at (world, factor).
    std::function<absl::StatusOr<std::unique_ptr<StepEngine>>(
        const core::ModelConfig& model, int world, int factor)>
        create_engine;
    // `epoch`'s replica group when this node has built it and it is
    // healthy; null otherwise.
    std::function<std::shared_ptr<comm::Collective>(int64_t epoch)>
        replica_group_of;
    // Makes a verified copy (its engine at header.step()) the node's, in
    // `epoch`; the source's header also says what it registered the model
    // with (agreement, registration_state).
    std::function<void(std::shared_ptr<StepEngine> engine,
                       core::ModelConfig model, uint64_t fingerprint,
                       const v1::ShardHeader& header, int64_t epoch)>
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

  // The FetchShard request for `plan` from `requester_rank` in `epoch`,
  // asking for the payload over the replica group when `over_replica_group`
  // (in pieces of the largest size, so that the source's precomputed CRCs
  // apply).
  static v1::FetchShardRequest RequestFor(int64_t epoch, int requester_rank,
                                          const v1::ShardTransfer& plan,
                                          bool over_replica_group);
  // FAILED_PRECONDITION unless the source's section count (its header's)
  // is this rank's: the two shards must have the same layout.
  static absl::Status CheckSectionCount(int theirs, size_t ours);
  // FAILED_PRECONDITION unless section `index` of the source's header
  // (`theirs`) has this rank's unit, kind and length (`ours`).
  static absl::Status CheckSection(const v1::ShardSection& theirs,
                                   const StepEngine::StateSection& ours,
                                   int index);

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
  // One attempt at copying from one source; defined in the .cc.
  struct Attempt;

  // Attempt `number` (from 1) of this run: probe (unless prepared from
  // the source), stream, verify, install.
  absl::Status FetchFrom(int64_t epoch, const v1::ShardTransfer& plan,
                         int source, int number, int world, int factor,
                         MonoTime deadline);
  std::string AddressOf(int rank) const;
  // The prepared engine if it was built for (world, factor); the slot is
  // emptied either way.
  std::optional<PreparedEngine> TakePrepared(int world, int factor);
  // NOT_FOUND when the source holds no model (nothing to recover).
  absl::Status CheckSourceHoldsModel(const std::string& address, int source,
                                     MonoTime deadline);
  // The assembler's destination for section `index`: builds (or takes) the
  // engine on the first call.
  absl::StatusOr<uint8_t*> SectionDestination(Attempt& attempt,
                                              const v1::ShardHeader& header,
                                              int index);
  // The attempt's RecoveryProgress TRANSFERRING_STATE: once when it
  // starts (no byte counts yet), then `done` bytes of the header's total
  // when the throttle lets them through.
  void AnnounceTransferring(const Attempt& attempt);
  void ReportBytes(Attempt& attempt, int64_t done);
  absl::Status ReadyEngine(Attempt& attempt, const v1::ShardHeader& header);
  void AnnounceEngineReady(const Attempt& attempt, bool was_prepared,
                           absl::Duration build_time);
  // Handles one streamed message (FetchShard's callback).
  absl::Status OnMessage(Attempt& attempt,
                         recovery::ShardStreamAssembler& assembler,
                         const v1::FetchShardResponse& message);
  absl::Status AwaitNextPiece(Attempt& attempt);
  absl::Status PostReceives(Attempt& attempt,
                            const recovery::ShardStreamAssembler& assembler);
  void AbandonReceives(Attempt& attempt, const absl::Status& failure);
  // Adds the attempt's verified bytes not counted yet to the received-bytes
  // metric, so that a long copy moves it while it runs.
  void CountBytes(Attempt& attempt, int64_t verified_bytes);
  void RecordTransfer(Attempt& attempt, int64_t verified_bytes, bool ok);
  absl::Status InstallCopy(Attempt& attempt, const v1::ShardHeader& header);
  void AnnounceCopied(const Attempt& attempt, int shard_index,
                      const v1::ShardHeader& header, absl::Duration took);

  const Options options_;
  mutable absl::Mutex mu_;
  std::optional<PreparedEngine> prepared_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARD_COPY_H_
